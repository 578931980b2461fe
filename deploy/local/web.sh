# shellcheck shell=bash
# The web UI (web/): Node, its packages and its build, for up.sh and test.sh.
#
# Source it (bash), then:
#   web_node     picks Node: the machine's `node` when Vite 7 runs on it (20.19+ or 22.12+), else
#                Node 24 from PyPI (tests/mcp/node24.sh); sets WEB_NODE_BIN (put first on PATH)
#   web_deps     `npm ci` when web/package-lock.json changed since the last install
#   web_api_types  fails when web/src/openapi.d.ts (the UI's API types) is not what
#                `npm run gen:api` makes of shared/api/openapi.json (the gateway's OpenAPI document)
#   web_build    web_api_types, then typecheck (against those types) + `vite build` into web/dist
#                when the UI's sources changed since the last build (the gateway embeds web/dist
#                when it is compiled)
#   web_unit     the vitest unit tests
# Stamps live in web/node_modules/ (.weft-lock.sha256, .weft-dist.sha256), so a clean checkout
# installs and builds once.

WEB_DIR="${ROOT:?set ROOT to the repository}/web"

_web_sha() { sha256sum "$@" | sha256sum | cut -d' ' -f1; }

web_node() {
    local v
    if v=$(node --version 2>/dev/null) && node -e '
        const [a, b] = process.versions.node.split(".").map(Number);
        process.exit((a === 20 && b >= 19) || (a === 22 && b >= 12) || a > 22 ? 0 : 1)'; then
        WEB_NODE_BIN=$(dirname "$(command -v node)")
    else
        echo "web: node ${v:-not found} is not one Vite 7 runs on (20.19+, 22.12+); using Node 24 from PyPI" >&2
        # shellcheck source=tests/mcp/node24.sh
        source "$ROOT/tests/mcp/node24.sh" || return 1
        [[ -n ${NODE24_BIN:-} ]] || return 1
        WEB_NODE_BIN=$NODE24_BIN
    fi
    export WEB_NODE_BIN
}

_web_npm() { (cd "$WEB_DIR" && PATH="$WEB_NODE_BIN:$PATH" npm "$@"); }

web_deps() {
    [[ -n ${WEB_NODE_BIN:-} ]] || web_node || return 1
    local want have=""
    want=$(_web_sha "$WEB_DIR/package-lock.json")
    [[ -f $WEB_DIR/node_modules/.weft-lock.sha256 ]] && have=$(<"$WEB_DIR/node_modules/.weft-lock.sha256")
    if [[ $want == "$have" ]]; then
        echo "web: node_modules matches package-lock.json"
        return 0
    fi
    _web_npm ci --no-audit --no-fund || return 1
    echo "$want" >"$WEB_DIR/node_modules/.weft-lock.sha256"
}

# The UI's sources: what a build depends on (only the paths that exist: `find` fails on a
# missing one, and up.sh runs with errexit and pipefail).
_web_sources_sha() {
    local p paths=()
    for p in src public index.html package-lock.json tsconfig.json vite.config.ts; do
        [[ -e $WEB_DIR/$p ]] && paths+=("$p")
    done
    (cd "$WEB_DIR" && find "${paths[@]}" -type f | LC_ALL=C sort | xargs sha256sum \
        | sha256sum | cut -d' ' -f1)
}

# Always run (it takes a second): the document can change while the UI's sources do not, and a
# server change that breaks the UI must then fail here, not in a browser.
web_api_types() {
    web_deps || return 1
    if ! _web_npm run --silent check:api; then
        echo "web: web/src/openapi.d.ts is stale against shared/api/openapi.json: run \`npm run gen:api\` in web/, fix what the typecheck then finds, and commit both" >&2
        return 1
    fi
    echo "web: web/src/openapi.d.ts matches shared/api/openapi.json"
}

web_build() {
    web_api_types || return 1
    local want have=""
    want=$(_web_sources_sha)
    [[ -f $WEB_DIR/node_modules/.weft-dist.sha256 ]] && have=$(<"$WEB_DIR/node_modules/.weft-dist.sha256")
    if [[ $want == "$have" && -f $WEB_DIR/dist/index.html ]]; then
        echo "web: web/dist is up to date with the UI's sources"
        return 0
    fi
    _web_npm run build || return 1
    echo "$want" >"$WEB_DIR/node_modules/.weft-dist.sha256"
}

web_unit() {
    web_deps || return 1
    _web_npm test
}

# Debian's Chromium for the end-to-end tests (no browser download), installed when missing.
web_chromium() {
    WEFT_CHROMIUM=${WEFT_CHROMIUM:-/usr/bin/chromium}
    if [[ ! -x $WEFT_CHROMIUM ]]; then
        echo "web: installing Debian's chromium (apt-get)" >&2
        local sudo=()
        ((EUID == 0)) || sudo=(sudo -n)
        "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=120 \
            update -q >/dev/null \
            && "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get \
                -o DPkg::Lock::Timeout=120 install -y -q chromium >/dev/null || {
            echo "web: could not install chromium with apt-get (root or passwordless sudo is needed); set WEFT_CHROMIUM to a Chromium binary" >&2
            return 1
        }
    fi
    export WEFT_CHROMIUM
    "$WEFT_CHROMIUM" --version
}

# web_e2e URL TOKEN: the Playwright end-to-end tests in Chromium against the fleet at URL, as
# the admin TOKEN; a failing test leaves its screenshot in target/ui-e2e/results/. With
# WEFT_UI_SCREENSHOTS=DIR the tests also save the pages docs/ui.md shows.
web_e2e() {
    web_deps || return 1
    web_chromium || return 1
    WEFT_UI_URL=$1 WEFT_TOKEN=$2 _web_npm run e2e
}
