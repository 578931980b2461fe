#!/usr/bin/env bash
# deploy/local/up.sh — run weft locally: make sure Postgres, Redis and NATS are up, build the
# web UI (web/dist, embedded in the binary and served at /ui) and the release binary, then hand the terminal to `weft up` (gateway, router, substrate and executor in one process).
# Extra arguments go to `weft up`, e.g. `deploy/local/up.sh --listen 127.0.0.1:9000`.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
# shellcheck source=deploy/local/deps.sh
source deploy/local/deps.sh
ensure_deps

ROOT=$PWD
# shellcheck source=deploy/local/web.sh
source deploy/local/web.sh
echo "up: building the web UI (web/ → web/dist; skipped when unchanged)" >&2
web_build
echo "up: building weft (cargo build --release; the first build takes a few minutes), then running 'weft up $*' — Ctrl-C stops it" >&2
cargo build --release --locked -p weft
# exec, so Ctrl-C and SIGTERM reach weft directly and it can shut down cleanly.
exec target/release/weft up "$@"
