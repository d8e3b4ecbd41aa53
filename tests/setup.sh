#!/usr/bin/env bash
# Install what the integration tests, the benchmark and the sample generator need, on a fresh
# Debian 12 machine, as root. Idempotent: when every package is already installed it does nothing
# (no apt-get update), so a re-run is fast. Rust is preinstalled and is not touched here.
set -euo pipefail

PACKAGES=(
  mariadb-server mariadb-client   # the real server and the `mariadb` CLI
  sysbench                        # oltp_read_write, prepared statements
  tcpdump                         # the capture, and `tcpdump -r` in the bench
  percona-toolkit                 # pt-query-digest, the peer in the bench
  tshark                          # the other peer in the bench
  wireshark-common                # editcap (bench prefix cut)
  python3 python3-pymysql python3-mysqldb python3-pytest
  time                            # /usr/bin/time -f
  openssl                         # self-signed certificate for the TLS test
  gzip procps
  postgresql-15 redis-server redis-tools python3-psycopg2 python3-psycopg python3-asyncpg python3-redis  # PG/Redis tests + bench
  maven default-jdk-headless python3-venv   # MongoDB tests + bench: tests/mongo-server jar, pymongo venv
  libpcap0.8 prometheus tmux libcap2-bin    # dbtap live: --filter (dlopened libpcap), a real Prometheus scraping /metrics, dbtap top in tmux, setpriv/capsh for the no-privilege test
  clang libbpf-dev libelf-dev zlib1g-dev pkg-config bpftool  # the eBPF source: BPF C built by clang in build.rs (bpftool: vmlinux.h), libbpf
  chromium                                  # the web UI tests: headless Chromium driven by Playwright
  clickhouse-server clickhouse-client       # the ClickHouse sink's tests (Debian's 18.16, a private server)
  dpkg-dev man-db                           # the packaging test: dpkg-shlibdeps for the .deb, man -w
  linux-perf                                # bench/ebpf-overhead.sh --attribute: perf record on mysqld
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done

if [ "${#missing[@]}" -eq 0 ]; then
  echo "setup: all ${#PACKAGES[@]} packages already installed"
else
  echo "setup: installing ${missing[*]}"
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup: must run as root to install packages (missing: ${missing[*]})" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  # tshark asks whether non-root users may capture; answer no without a prompt.
  echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections
  # Keep the packages' own services (mariadb on port 3306) from being started by the install:
  # the tests run private servers on their own ports and datadirs, and leave 3306 alone.
  made_policy=0
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
    chmod +x /usr/sbin/policy-rc.d
    made_policy=1
  fi
  rc=0
  { apt-get update -q && apt-get install -y -q --no-install-recommends "${PACKAGES[@]}" </dev/null; } || rc=$?
  if [ "$made_policy" = 1 ]; then rm -f /usr/sbin/policy-rc.d; fi
  [ "$rc" = 0 ] || { echo "setup: apt-get failed ($rc)" >&2; exit "$rc"; }
fi

for b in mariadbd mariadb-install-db mariadb tcpdump sysbench pt-query-digest tshark editcap; do
  command -v "$b" >/dev/null || { echo "setup: $b not found after install" >&2; exit 1; }
done
/usr/bin/python3 -c 'import pymysql, MySQLdb, pytest' || { echo "setup: python modules missing" >&2; exit 1; }
[ -x /usr/bin/time ] || { echo "setup: /usr/bin/time missing" >&2; exit 1; }
# MongoDB: the wire-protocol server (tests/mongo-server) and pymongo in a venv (not in Debian 12).
MONGO_JAR=tests/mongo-server/target/mongo-server.jar
MONGO_VENV=tests/out/venv-mongo
cd "$(dirname "$0")/.."
if [ ! -s "$MONGO_JAR" ] || [ tests/mongo-server/src/main/java/dbtap/MongoServerMain.java -nt "$MONGO_JAR" ]; then
  echo "setup: building $MONGO_JAR"
  mvn -q -f tests/mongo-server/pom.xml package -DskipTests
fi
if ! "$MONGO_VENV/bin/python" -c 'import pymongo' 2>/dev/null; then
  echo "setup: creating $MONGO_VENV with pymongo"
  rm -rf "$MONGO_VENV"
  /usr/bin/python3 -m venv "$MONGO_VENV"
  "$MONGO_VENV/bin/pip" install -q pymongo
fi
# Web UI tests: Playwright for Python, driving the system Chromium (executable_path=/usr/bin/chromium;
# it cannot download its own browsers here).
if ! /usr/bin/python3 -c 'import playwright' 2>/dev/null; then
  echo "setup: installing playwright for python"
  /usr/bin/python3 -m pip install -q --break-system-packages playwright==1.65.2
fi
# The packaging test (test_packaging.py): cargo-deb builds the .deb (its install took 2.5 min
# here); dpkg-dev (dpkg-shlibdeps, for the package's Depends), man-db and systemd
# (systemd-analyze verify) are in the base image.
if ! command -v cargo-deb >/dev/null && [ ! -x "${CARGO_HOME:-$HOME/.cargo}/bin/cargo-deb" ]; then
  echo "setup: installing cargo-deb"
  cargo install -q cargo-deb --locked --version 3.8.0
fi
# The ClickHouse sink's tests: chdb (an embedded current ClickHouse) checks the DDL and queries
# on a current version too.
if ! /usr/bin/python3 -c 'import chdb' 2>/dev/null; then
  echo "setup: installing chdb for python"
  /usr/bin/python3 -m pip install -q --break-system-packages chdb==4.4.0
fi
# MongoDB login on the replay target (test_replay_mongo_auth.py): FerretDB 1.24.2 (Go; SQLite
# backend; SCRAM-SHA-256/SHA-1 users with --test-enable-new-auth), built once from the Go module
# proxy (`go install` cannot: its binary panics without build/version/version.txt, so the module
# is copied, given that file, and built). Offline, or without Go, the test skips and says so.
FERRET_BIN=tests/out/ferretdb-v1.24.2/ferretdb
if [ ! -x "$FERRET_BIN" ]; then
  GO=$(command -v go || echo /usr/local/go/bin/go)
  ferret_src=$(mktemp -d)
  echo "setup: building $FERRET_BIN"
  if [ -x "$GO" ] \
     && ferret_mod=$("$GO" mod download -json github.com/FerretDB/FerretDB@v1.24.2 | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p') \
     && [ -n "$ferret_mod" ] && cp -r "$ferret_mod/." "$ferret_src" && chmod -R u+w "$ferret_src" \
     && echo v1.24.2 > "$ferret_src/build/version/version.txt" \
     && mkdir -p "$(dirname "$FERRET_BIN")" \
     && (cd "$ferret_src" && "$GO" build -o "$OLDPWD/$FERRET_BIN.tmp" ./cmd/ferretdb) \
     && mv "$FERRET_BIN.tmp" "$FERRET_BIN"; then
    :
  else
    echo "setup: warning: FerretDB not built (no Go, or offline): test_replay_mongo_auth.py will skip" >&2
  fi
  rm -rf "$ferret_src"
fi
echo "setup: ok"
