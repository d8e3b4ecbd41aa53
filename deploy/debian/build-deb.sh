#!/bin/sh
# Builds the Debian package of dbtap: target/debian/dbtap_<version>-1_<arch>.deb.
#
#   deploy/debian/build-deb.sh [cargo-deb options...]
#
# Needs cargo-deb (`cargo install cargo-deb --locked`). Builds the release binary, has it write
# its man pages (dbtap.1, dbtap-<subcommand>.1) and its bash, zsh and fish completions into
# target/release/dbtap-deb-assets, then packages them with the systemd unit and
# /etc/dbtap/dbtap.toml ([package.metadata.deb] in crates/dbtap/Cargo.toml). With --no-build
# the binary already in target/release (or $CARGO_TARGET_DIR/release) is packaged as it is.
# The binary is stripped unless --no-strip, --separate-debug-symbols or --dbgsym is given.
set -eu
cd "$(dirname "$0")/../.."
target=${CARGO_TARGET_DIR:-target}
build=1
strip=--strip # the release profile keeps line tables (debug = 1): not in the package
for a in "$@"; do
    case "$a" in
    --no-build) build=0 ;;
    --strip | --no-strip | --separate-debug-symbols | --dbgsym) strip= ;;
    esac
done
if [ "$build" = 1 ]; then
    cargo build --release --locked -p dbtap
fi
bin=$target/release/dbtap
assets=$target/release/dbtap-deb-assets
rm -rf "$assets"
mkdir -p "$assets/man" "$assets/completions"
"$bin" man --dir "$assets/man"
gzip -9n "$assets"/man/*.1
"$bin" completions bash >"$assets/completions/dbtap"
"$bin" completions zsh >"$assets/completions/_dbtap"
"$bin" completions fish >"$assets/completions/dbtap.fish"
if [ "$build" = 1 ]; then
    exec cargo deb -p dbtap --no-build $strip "$@"
fi
exec cargo deb -p dbtap $strip "$@"
