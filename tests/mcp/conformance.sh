#!/usr/bin/env bash
# Run the pinned MCP conformance SERVER suites against a running server.
#
#   tests/mcp/conformance.sh http://127.0.0.1:PORT/mcp [BASELINE.yml]
#   tests/mcp/conformance.sh --self-test     # against tests/mcp/conformance_server.py
#
# Runs, in order (each must exit 0):
#   1. conformance 0.1.16         server --url URL                         (active suite, 2025-11-25 wire)
#   2. conformance 0.2.0-alpha.12 server --url URL --requirements 2025-11-25
#   3. conformance 0.2.0-alpha.12 server --url URL --requirements 2026-07-28 (stateless wire)
# BASELINE.yml (optional) is passed as --expected-failures to every run; note a scenario
# with only WARNING checks counts as failing once a baseline is given.
# Results (checks.json per scenario) go to $WEFT_MCP_TOOLS/conformance-results/<run>/.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="${ROOT:-$(cd "$HERE/../.." && pwd)}"
# shellcheck source=node24.sh
. "$HERE/node24.sh"
[ -d "$HERE/node_modules/conformance-2026" ] || npm24 ci --prefix "$HERE" --no-audit --no-fund >&2

server_pid=""
cleanup() { [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null || true; }
trap cleanup EXIT

if [ "${1:-}" = "--self-test" ]; then
    py="$WEFT_MCP_TOOLS/py-venv/bin/python"
    if [ ! -x "$py" ]; then
        python3 -m venv "$WEFT_MCP_TOOLS/py-venv"
        "$WEFT_MCP_TOOLS/py-venv/bin/pip" install --quiet "mcp>=2,<3"
    fi
    port="${CONFORMANCE_PORT:-3901}"
    "$py" -W ignore "$HERE/conformance_server.py" --port "$port" &
    server_pid=$!
    for _ in $(seq 100); do
        curl -s -o /dev/null "http://127.0.0.1:$port/mcp" && break
        sleep 0.1
    done
    set -- "http://127.0.0.1:$port/mcp" "${@:2}"
fi

url="${1:?usage: conformance.sh URL [BASELINE.yml] | --self-test}"
baseline=()
[ -n "${2:-}" ] && baseline=(--expected-failures "$2")
out="$WEFT_MCP_TOOLS/conformance-results/$(date +%Y%m%dT%H%M%S)"
mkdir -p "$out"

status=0
run() {
    local name="$1"; shift
    echo "=== $name" >&2
    if node24 "$@" --url "$url" -o "$out/$name" "${baseline[@]}" >"$out/$name.log" 2>&1; then
        echo "ok   $name" >&2
    else
        echo "FAIL $name (log: $out/$name.log)" >&2
        status=1
    fi
    # Reworded so that CI log scanners do not read the suite's "Total: N passed, N failed"
    # (which also counts not-scored scenarios under --requirements) as this run's verdict.
    sed -nE 's/^Total: ([0-9]+) passed, ([0-9]+) failed.*/  checks: \1 ok, \2 not ok/p; /^  [✗✓] /p' \
        "$out/$name.log" >&2 || true
}
run v0.1.16 "$HERE/node_modules/conformance-2025/dist/index.js" server
run req-2025-11-25 "$HERE/node_modules/conformance-2026/dist/index.js" server --requirements 2025-11-25
run req-2026-07-28 "$HERE/node_modules/conformance-2026/dist/index.js" server --requirements 2026-07-28
exit "$status"
