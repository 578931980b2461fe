#!/usr/bin/env bash
# The official MCP conformance suite (@modelcontextprotocol/conformance, pinned in package.json)
# against weft's own MCP layers:
#   server  $WEFT_BIN_DIR/weft-mcp-conformance-server: the suite's fixture tools, resources and
#           prompts served through weft_mcp_bridge::face::streamable (the gateway's transport and
#           session layers; with WEFT_DATABASE_URL, its Postgres session store)
#   client  $WEFT_BIN_DIR/weft-mcp-conformance-client: the MCP bridge's client (pool::Pool)
# (both from the test-only package tests/mcp/conformance-fixtures, `cargo build -p
# weft-mcp-conformance`, or any `cargo build --bins`).
#
#   tests/mcp/conformance.sh                          # the six runs below; exit 1 on any unexpected result
#   tests/mcp/conformance.sh --server-url URL [BASELINE.yml]   # only the three server runs, against URL
#   tests/mcp/conformance.sh --self-test              # the server runs against h1's Python reference server
#
# Runs (each with its baseline tests/mcp/expected-failures/<version>[-<reqs>].yml, which lists
# every expected failure with its reason; a baseline also makes WARNINGs fail, and an entry that
# passes is stale and fails the run):
#   conformance 0.1.16         server active       (revision 2025-11-25, the active suite)
#   conformance 0.1.16         client 2025-11-25   (every client scenario up to 2025-11-25)
#   conformance 0.2.0-alpha.12 server 2025-11-25   (--requirements 2025-11-25)
#   conformance 0.2.0-alpha.12 client 2025-11-25
#   conformance 0.2.0-alpha.12 server 2026-07-28   (--requirements 2026-07-28, the stateless wire)
#   conformance 0.2.0-alpha.12 client 2026-07-28
# Each prints one line: `conformance <version> <server|client> <reqs>: N scenarios passed, M
# expected failures` (scored scenarios only; --requirements also runs not-scored ones).
#
# Environment: WEFT_BIN_DIR (default target/debug), WEFT_DATABASE_URL (optional: a Postgres
# database for the fixture server's sessions; created when missing, left in place),
# WEFT_MCP_TOOLS (default target/mcp-tools; Node 24 and the suite are installed there once).
# Logs and per-scenario checks.json: $WEFT_MCP_TOOLS/conformance-results/<timestamp>/.
set -euo pipefail
exec 0</dev/null
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="${ROOT:-$(cd "$HERE/../.." && pwd)}"
BIN_DIR="${WEFT_BIN_DIR:-$ROOT/target/debug}"
RUN_TIMEOUT=600 # seconds per suite run
# shellcheck source=node24.sh
. "$HERE/node24.sh"
if [ ! -f "$HERE/node_modules/conformance-2025/dist/index.js" ] \
    || [ ! -f "$HERE/node_modules/conformance-2026/dist/index.js" ]; then
    npm24 ci --prefix "$HERE" --no-audit --no-fund >&2
fi
C25="$HERE/node_modules/conformance-2025/dist/index.js"
C26="$HERE/node_modules/conformance-2026/dist/index.js"
V25=0.1.16
V26=0.2.0-alpha.12
BASELINES="$HERE/expected-failures"

out="$WEFT_MCP_TOOLS/conformance-results/$(date +%Y%m%dT%H%M%S)-$$"
mkdir -p "$out"
server_pid=""
cleanup() {
    if [ -n "$server_pid" ]; then
        kill "$server_pid" 2>/dev/null || true
        wait "$server_pid" 2>/dev/null || true
    fi
}
trap cleanup EXIT

status=0

# scored REQS ROLE: the scenarios revision REQS requires of a ROLE (server|client), one a line
# (0.2.0's `list --requirements`; with a baseline the run itself does not say which were scored).
scored() {
    local file="$out/.scored-$1-$2"
    if [ ! -f "$file" ]; then
        PATH="$NODE24_BIN:$PATH" "$NODE24_BIN/node" "$C26" list --requirements "$1" 2>/dev/null \
            | awk -v want="$2" '
                /^Run and reported/ { exit }
                /^Server scenarios/ { role = "server"; next }
                /^Client scenarios/ { role = "client"; next }
                role == want && /^  - / { sub(/^  - /, ""); print }' >"$file"
    fi
    cat "$file"
}

# failing_checks DIR SCENARIO: the checks of SCENARIO's newest result under DIR that did not
# pass, one a line with its message and details (to tell a timing race from a real failure).
failing_checks() {
    # An entry may be `scenario:check-id`; server results are named `server-<scenario>-<time>`.
    local scenario=${2%%:*} checks
    checks=$( (ls -d "$1/$scenario"-*/checks.json "$1/server-$scenario"-*/checks.json 2>/dev/null || true) | tail -n 1)
    [ -n "$checks" ] || return 0
    python3 - "$checks" <<'PY'
import json, sys
for c in json.load(open(sys.argv[1])):
    if c.get("status") in ("FAILURE", "WARNING"):
        print(f"    {c['status']} {c['id']}: {c.get('errorMessage', '')} {json.dumps(c.get('details', {}))[:400]}")
PY
}

# summarize LOG VERSION ROLE REQS RC [SCORED]: the run's one line (SCORED: a file naming the
# scenarios that count; default all); on failure, what was unexpected.
summarize() {
    local log=$1 version=$2 role=$3 reqs=$4 rc=$5 scored_file=${6:-} clean
    clean="$out/.clean.log"
    sed 's/\x1b\[[0-9;]*m//g' "$log" >"$clean"
    local passed expected
    passed=$(awk -v scored="$scored_file" '
        BEGIN { if (scored != "") while ((getline l < scored) > 0) want[l] = 1 }
        /^=== (SUITE )?SUMMARY ===/ { s = 1; next }
        s && /^✓ [^ ]+:/ { name = $2; sub(/:$/, "", name); if (scored == "" || name in want) c++ }
        END { print c + 0 }
    ' "$clean")
    expected=$(awk '/^Expected failures \(in baseline\):/ { e = 1; next } e && /^  ~ / { c++; next } e { e = 0 } END { print c + 0 }' "$clean")
    echo "conformance $version $role $reqs: $passed scenarios passed, $expected expected failures"
    if [ "$rc" -ne 0 ]; then
        status=1
        echo "  FAILED (exit $rc); log: $log" >&2
        awk '/^(Unexpected failures|Stale baseline entries)/ { p = 1; print "  " $0; next }
             p && /^  / { print "  " $0; next } p { p = 0 }' "$clean" >&2
        # What each unexpected scenario failed on (its checks.json under the run's -o dir).
        awk '/^Unexpected failures/ { p = 1; next } p && /^  +✗ / { print $2; next } p { p = 0 }' "$clean" \
            | while read -r scenario; do failing_checks "${log%.log}" "$scenario" || true; done >&2
        if ! grep -qE '^(Unexpected failures|Stale baseline entries)' "$clean"; then
            tail -n 15 "$clean" | sed 's/^/  | /' >&2
        fi
    fi
    rm -f "$clean"
}

# suite NAME VERSION ROLE REQS -- ARGS...: one suite run, its log under $out.
suite() {
    local name=$1 version=$2 role=$3 reqs=$4 rc=0 scored_file=""
    shift 5
    if [ "$version" = "$V26" ]; then
        scored "$reqs" "$role" >/dev/null
        scored_file="$out/.scored-$reqs-$role"
    fi
    # node24 is a shell function; timeout needs the program (and kills its whole group).
    PATH="$NODE24_BIN:$PATH" timeout "$RUN_TIMEOUT" "$NODE24_BIN/node" "$@" -o "$out/$name" \
        >"$out/$name.log" 2>&1 || rc=$?
    summarize "$out/$name.log" "$version" "$role" "$reqs" "$rc" "$scored_file"
}

# server_runs URL [BASELINE...]: the three server runs; each BASELINE is v25, v26-2025, v26-2026.
server_runs() {
    local url=$1 b25=${2:-} b2025=${3:-} b2026=${4:-}
    suite "$V25-server" "$V25" server active -- "$C25" server --url "$url" ${b25:+--expected-failures "$b25"}
    suite "$V26-server-2025-11-25" "$V26" server 2025-11-25 -- "$C26" server --url "$url" \
        --requirements 2025-11-25 ${b2025:+--expected-failures "$b2025"}
    suite "$V26-server-2026-07-28" "$V26" server 2026-07-28 -- "$C26" server --url "$url" \
        --requirements 2026-07-28 ${b2026:+--expected-failures "$b2026"}
}

case "${1:-}" in
--self-test)
    py="$WEFT_MCP_TOOLS/py-venv/bin/python"
    if [ ! -x "$py" ]; then
        python3 -m venv "$WEFT_MCP_TOOLS/py-venv"
        "$WEFT_MCP_TOOLS/py-venv/bin/pip" install --quiet "mcp>=2,<3"
    fi
    port="${CONFORMANCE_PORT:-3901}"
    "$py" -W ignore "$HERE/conformance_server.py" --port "$port" >"$out/python-server.log" 2>&1 &
    server_pid=$!
    for _ in $(seq 100); do
        curl -s -o /dev/null "http://127.0.0.1:$port/mcp" && break
        sleep 0.1
    done
    server_runs "http://127.0.0.1:$port/mcp"
    ;;
--server-url)
    url="${2:?usage: conformance.sh --server-url URL [BASELINE.yml]}"
    server_runs "$url" "${3:-}" "${3:-}" "${3:-}"
    ;;
"")
    for b in weft-mcp-conformance-server weft-mcp-conformance-client; do
        if [ ! -x "$BIN_DIR/$b" ]; then
            echo "conformance.sh: $BIN_DIR/$b is missing (cargo build -p weft-mcp-conformance)" >&2
            exit 2
        fi
    done
    db=()
    [ -n "${WEFT_DATABASE_URL:-}" ] && db=(--database-url "$WEFT_DATABASE_URL")
    port_file="$out/server.port"
    "$BIN_DIR/weft-mcp-conformance-server" --listen 127.0.0.1:0 --port-file "$port_file" "${db[@]}" \
        >"$out/server.log" 2>&1 &
    server_pid=$!
    for _ in $(seq 300); do
        [ -s "$port_file" ] && break
        kill -0 "$server_pid" 2>/dev/null || break
        sleep 0.1
    done
    if [ ! -s "$port_file" ]; then
        echo "conformance.sh: the fixture server did not start; its log:" >&2
        sed 's/^/  | /' "$out/server.log" >&2
        exit 1
    fi
    url="http://127.0.0.1:$(cat "$port_file")/mcp"
    client="$BIN_DIR/weft-mcp-conformance-client"
    # The suite splits --command on spaces: the path must have none.
    case "$client" in *" "*)
        echo "conformance.sh: the client's path may not contain spaces: $client" >&2
        exit 2
        ;;
    esac
    server_runs "$url" "$BASELINES/$V25.yml" "$BASELINES/$V26-2025-11-25.yml" "$BASELINES/$V26-2026-07-28.yml"
    suite "$V25-client" "$V25" client 2025-11-25 -- "$C25" client --command "$client" \
        --suite all --spec-version 2025-11-25 --expected-failures "$BASELINES/$V25.yml"
    suite "$V26-client-2025-11-25" "$V26" client 2025-11-25 -- "$C26" client --command "$client" \
        --requirements 2025-11-25 --expected-failures "$BASELINES/$V26-2025-11-25.yml"
    suite "$V26-client-2026-07-28" "$V26" client 2026-07-28 -- "$C26" client --command "$client" \
        --requirements 2026-07-28 --expected-failures "$BASELINES/$V26-2026-07-28.yml"
    ;;
*)
    echo "usage: conformance.sh [--server-url URL [BASELINE.yml] | --self-test]" >&2
    exit 2
    ;;
esac
[ "$status" -eq 0 ] || echo "conformance: FAILED (logs: $out)" >&2
exit "$status"
