#!/usr/bin/env bash
# deploy/local/test.sh — the full suite, exactly as CI runs it (.ci/run execs this file):
#
#   1. local infrastructure (deploy/local/deps.sh: Postgres, Redis, NATS with JetStream), then
#      the web UI (deploy/local/web.sh): `npm ci` when web/package-lock.json changed, the vitest
#      unit tests, a check that web/src/openapi.d.ts matches shared/api/openapi.json, then the
#      typecheck + `vite build` into web/dist when its sources changed (the gateway embeds it);
#      the deployment files (deploy/check.sh: Dockerfile, compose, Helm chart)
#   2. cargo fmt --check, import cycles between modules (tests/harness/module_cycles.py),
#      clippy -D warnings, the Rust tests (nextest when installed), linked with
#      mold when it can be had (use_fast_linker, deps.sh); fuzz/run.sh is for manual campaigns
#   3. cargo build --bins (with --tests, so it reuses the test build); the official MCP
#      conformance suite against weft's MCP layers (tests/mcp/conformance.sh); then the black-box
#      compatibility suite (tests/compat, with the real `openai` package) against two arrangements:
#        weft-up  one `weft up` process (gateway, router, substrate, executor)
#        split    separate weft-router, weft-substrate, weft-mcp-bridge, weft-executor,
#                 weft-ingress and two weft-gateway replicas (MCP sessions cross them)
#      configured (target/compat-logs/compat.toml) with the mock provider and its aliases plus one
#      provider per HTTP driver kind, `fake-<kind>` (alias `via-<kind>`), all at a
#      `weft-fake-upstream` replaying services/router/tests/fixtures/<kind>/.
#   4. only with WEFT_REAL_LLM=1: the real-model tier: llama-server with a small model
#      (deploy/local/real-llm.sh; built and downloaded on first use, then cached), a third
#      `weft up` with providers `llama-openai` and `llama-anthropic` (aliases `real-openai`,
#      `real-anthropic`) in front of it, and tests/compat/test_real_llm.py against it.
#   5. the web UI's end-to-end tests (web/e2e, Playwright in Debian's Chromium) against a `weft up`
#      of their own; a failing test's screenshot is kept in target/ui-e2e/results/
#   6. the security suites (tests/security, venv target/security-venv, a `weft up` of their own
#      with no config file): the NUL / oversize / wrong-type pass generated from
#      /v1/openapi.json, then schemathesis (seed WEFT_SCHEMATHESIS_SEED,
#      WEFT_SCHEMATHESIS_EXAMPLES fuzzed examples per operation); the summary prints their sizes
#   7. the fault harness (deploy/local/chaos.sh, docs/reliability.md): 2 replicas of every service
#      under a mixed load, kill -9s, Redis/NATS/Postgres restarts, a frozen executor, partitions,
#      a tenant over quota, then a checker of the final state; 2 minutes, 10 with WEFT_CHAOS=1
#   8. tests/findings/repro.py and second_pass.py: the findings of the hardening review and of
#      the second security pass as black-box repros, one `weft up` of their own per check.
#
# Every fleet (each with a fresh database, NATS subject prefix and Redis key prefix, and a clean
# exit on SIGTERM required) is started, watched and stopped by tests/harness/fleet.py (its
# docstring says what the suites get); the summary's totals come from tests/harness/totals.py.
# Non-interactive; exits non-zero when any step fails and ends with a summary.
# Options (for local iteration; CI uses none):
#   --compat-only   skip fmt, clippy, the Rust tests and the build; use binaries already in
#                   $WEFT_BIN_DIR (default target/debug). The real-model tier still runs when
#                   WEFT_REAL_LLM=1.
# Process logs and pytest reports are kept in target/compat-logs/.
# Most functions run only through `step NAME FUNCTION`, which shellcheck cannot follow; the
# shell commands given to fleet.py expand in the fleet's environment, not here.
# shellcheck disable=SC2317,SC2016
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
ROOT=$PWD
export ROOT CI=true
exec 0</dev/null # no stdin: nothing here may prompt
# Signing secrets of the webhooks tests/compat/test_webhooks.py defines: the receiver reads each
# from the environment variable its definition's `secret_env` names (test values, not secrets).
export WEFT_WEBHOOK_DEFAULT__TEST_STD=whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw
export WEFT_WEBHOOK_DEFAULT__TEST_GH="It's a Secret to Everybody"
export WEFT_WEBHOOK_DEFAULT__TEST_STRIPE=whsec_stripe_test_secret_0123456789
export WEFT_WEBHOOK_DEFAULT__TEST_SLACK=8f742231b10e8888abcd99yyyzzz85a5
export WEFT_WEBHOOK_DEFAULT__TEST_HMAC=bare-hmac-secret

# shellcheck source=deploy/local/deps.sh
source deploy/local/deps.sh
# shellcheck source=deploy/local/web.sh
source deploy/local/web.sh

COMPAT_ONLY=0
for arg in "$@"; do
    case $arg in
        --compat-only) COMPAT_ONLY=1 ;;
        *) echo "test.sh: unknown argument: $arg" >&2; exit 2 ;;
    esac
done

BIN_DIR=${WEFT_BIN_DIR:-$ROOT/target/debug}
VENV=$ROOT/target/compat-venv
PY=$VENV/bin/python
SECURITY_VENV=$ROOT/target/security-venv
SECURITY_PY=$SECURITY_VENV/bin/python
LOGS=$ROOT/target/compat-logs
PYTEST_TIMEOUT=900
STEPS=$(mktemp) # one summary line per step (fleet.py adds the security suites' own)
START=$SECONDS

banner() { printf '\n==> %s\n' "$*"; }

# step NAME CMD...: run a step, record ok/FAILED and its duration; never exits the script.
step() {
    local name=$1 t0=$SECONDS status=0
    shift
    banner "$name"
    "$@" || status=$?
    if ((status == 0)); then
        echo "ok      $name ($((SECONDS - t0))s)" >>"$STEPS"
    else
        echo "FAILED  $name (exit $status, $((SECONDS - t0))s)" >>"$STEPS"
    fi
    return "$status"
}

skip() { echo "skipped $1 ($2)" >>"$STEPS"; }
failed() { grep -q '^FAILED' "$STEPS"; }

trap 'rm -f "$STEPS"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

rust_tests() {
    if command -v cargo-nextest >/dev/null 2>&1; then
        # nextest skips doctests; run those with cargo test.
        cargo nextest run --workspace --locked --no-tests=warn && cargo test --workspace --locked --doc
    else
        cargo test --workspace --locked
    fi
}

# make_venv VENV REQUIREMENTS: a venv with a suite's pinned packages (the security suites have
# their own: schemathesis pins its own pytest and requests); python3-venv installed when missing.
make_venv() {
    if [[ ! -x $1/bin/python ]] || ! "$1/bin/python" -c 'import sys' >/dev/null 2>&1; then
        rm -rf "$1"
        if ! python3 -m venv "$1"; then
            echo "python3 -m venv failed; installing python3-venv" >&2
            rm -rf "$1"
            _deps_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-venv >/dev/null || return 1
            python3 -m venv "$1" || return 1
        fi
    fi
    "$1/bin/python" -m pip install -q --disable-pip-version-check -r "$2"
}

# fleet run OPTIONS...: tests/harness/fleet.py with this run's binaries and logs folder.
fleet() { python3 tests/harness/fleet.py "$1" --bin-dir "$BIN_DIR" --logs "$LOGS" "${@:2}"; }

MCP_TOOLS_OK=0 # set by mcp_tools: Node 24 and tests/mcp/node_modules are in place
MCP_INSPECTOR=$ROOT/tests/mcp/node_modules/@modelcontextprotocol/inspector/clients/launcher/build/index.js

# mcp_tools: Node 24 from PyPI (tests/mcp/node24.sh) and the pinned suite + Inspector
# (tests/mcp/package-lock.json), installed once; `npm ci` again only when the lock changed.
mcp_tools() {
    # shellcheck source=tests/mcp/node24.sh
    source "$ROOT/tests/mcp/node24.sh" || return 1
    [[ -n ${NODE24_BIN:-} ]] || return 1
    local stamp=$ROOT/tests/mcp/node_modules/.weft-lock-sha256 want
    want=$(sha256sum "$ROOT/tests/mcp/package-lock.json" | cut -d' ' -f1)
    if [[ ! -f $stamp || $(cat "$stamp") != "$want" ]]; then
        npm24 ci --prefix "$ROOT/tests/mcp" --no-audit --no-fund --loglevel=error || return 1
        echo "$want" >"$stamp"
    fi
    node24 --version
    MCP_TOOLS_OK=1
}

# mcp_conformance: the official MCP conformance suite against weft's own MCP layers, on a fresh
# database (tests/mcp/conformance.sh says which versions and expected failures).
mcp_conformance() {
    fleet run --arrangement none --name mcp_conformance --timeout 900 \
        --tee "$LOGS/mcp-conformance.txt" -- "$ROOT/tests/mcp/conformance.sh"
}

# compat LABEL ARRANGEMENT [FLEET OPTIONS...] [-- PYTEST TARGETS...]: the compat suite (default:
# tests/compat without the real-model tests) against one arrangement. WEFT_REQUIRE_FAKE_UPSTREAM=1
# makes tests/compat/test_providers.py fail (not skip) when the fake upstream is missing.
compat() {
    local label=$1 arrangement=$2 opts=()
    shift 2
    while (($#)) && [[ $1 != -- ]]; do opts+=("$1") && shift; done
    shift || true
    (($#)) || set -- tests/compat --ignore=tests/compat/test_real_llm.py
    WEFT_REQUIRE_INSPECTOR=$MCP_TOOLS_OK WEFT_NODE24=${NODE24_BIN:+$NODE24_BIN/node} \
        WEFT_INSPECTOR=$MCP_INSPECTOR WEFT_REQUIRE_FAKE_UPSTREAM=1 \
        fleet run --arrangement "$arrangement" --name compat --label "$label" --python "$PY" \
        --timeout "$PYTEST_TIMEOUT" "${opts[@]}" -- "$PY" -m pytest "$@" -p no:cacheprovider \
        -q -rfE --junitxml="$LOGS/pytest-$label.xml"
}

ui_e2e() {
    fleet run --name ui-e2e --timeout 600 -- \
        bash -c 'source deploy/local/web.sh && web_e2e "$WEFT_URL" "$WEFT_TOKEN"'
}

# security_pytest NAME TARGET: the command line of one security suite; its sizes go to
# $LOGS/security-NAME.json, its report to $LOGS/security-NAME.xml.
security_pytest() {
    printf 'WEFT_SECURITY_REPORT=%q %q -m pytest %q -p no:cacheprovider -q -rfE --tb=short --junitxml=%q' \
        "$LOGS/security-$1.json" "$SECURITY_PY" "$2" "$LOGS/security-$1.xml"
}

# security: both suites against one `weft up` (no config file); fleet.py records the four steps.
security() {
    fleet run --name security --timeout "$PYTEST_TIMEOUT" --results "$STEPS" \
        --start-step "security: weft up" --stop-step "security: weft up shut down" \
        --step "security: NUL / oversize / wrong-type pass" \
        "$(security_pytest nul tests/security/test_nul_oversize_types.py)" \
        --step "security: schemathesis" "$(security_pytest schemathesis tests/security/test_schemathesis.py)"
}

# chaos_run: deploy/local/chaos.sh with the binaries built above; its report in $LOGS/chaos.txt.
chaos_run() {
    local dur=120s
    if [[ ${WEFT_CHAOS:-0} == 1 ]]; then dur=10m; fi
    SKIP_BUILD=1 WEFT_BIN_DIR=$BIN_DIR timeout --foreground 1500 deploy/local/chaos.sh "$dur" \
        --work "$ROOT/target/chaos" 2>&1 | tee "$LOGS/chaos.txt"
    return "${PIPESTATUS[0]}"
}

summary() {
    local totals
    banner "summary ($((SECONDS - START))s)"
    sed 's/^/  /' "$STEPS"
    totals=$(python3 tests/harness/totals.py compat "$LOGS" 2>/dev/null) || totals=""
    if failed; then echo "test.sh: FAILED"; else echo "test.sh: all steps passed"; fi
    if [[ -n $totals ]]; then echo "compat: $totals"; fi
    grep -s '^conformance ' "$LOGS/mcp-conformance.txt" || true
    python3 tests/harness/totals.py security "$LOGS" 2>/dev/null || true
    if [[ -s $LOGS/real-llm.timing ]]; then echo "real LLM tier: $(<"$LOGS/real-llm.timing")"; fi
    grep -sE '^(load held|  chat:|  runs:|  webhooks:|  quota tenant:|  REST writes:|violations:)' \
        "$LOGS/chaos.txt" | sed 's/^/chaos: /' || true
}

# --- main ---------------------------------------------------------------------------------------

if ! step "deps (postgres, redis, nats)" ensure_deps; then
    summary
    exit 1
fi

BUILD_OK=1
WEB_OK=1
if ((COMPAT_ONLY)); then
    skip "web UI" "--compat-only"
    skip "rust checks" "--compat-only"
else
    # Before the Rust build, which embeds web/dist in the gateway.
    step "web UI: build (web/dist)" web_build || WEB_OK=0
    step "web UI: unit tests (vitest)" web_unit || true
    step "deploy files: Dockerfile, compose, Helm chart (deploy/check.sh)" deploy/check.sh || true
    use_fast_linker
    ensure_test_tools
    step "cargo fmt --check" cargo fmt --all --check || true
    step "module import cycles (tests/harness/module_cycles.py)" python3 tests/harness/module_cycles.py || true
    step "cargo clippy" cargo clippy --workspace --all-targets --locked -- -D warnings || true
    step "rust tests" rust_tests || true
    # With --tests, the features are the ones the test build above unified (dev-dependencies
    # included), so this reuses its artifacts and only links the binaries it did not need.
    step "cargo build --bins" cargo build --locked --workspace --bins --tests || BUILD_OK=0
fi

rm -rf "$LOGS"
mkdir -p "$LOGS"
if ((!BUILD_OK)); then
    skip "compat suite" "the build failed"
elif ! step "python venv (target/compat-venv)" make_venv "$VENV" tests/compat/requirements.txt; then
    skip "compat suite" "no venv"
else
    step "mcp tools (Node 24, conformance suite, Inspector)" mcp_tools || true
    if ((MCP_TOOLS_OK)); then
        step "mcp conformance (official suite vs weft's MCP layers)" mcp_conformance || true
    else
        skip "mcp conformance" "the MCP tooling is not installed"
    fi
    step "compat: weft up" compat weft-up up --fake-upstream || true
    step "compat: split (router, substrate, executor, gateway)" compat split split --fake-upstream || true
    if [[ ${WEFT_REAL_LLM:-0} == 1 ]]; then
        step "compat: real LLM tier (llama-server + weft up)" \
            compat real-llm up --real-llm -- tests/compat/test_real_llm.py || true
    else
        skip "compat: real LLM tier" "set WEFT_REAL_LLM=1 to run it"
    fi
fi

if ((!BUILD_OK)); then
    skip "web UI: end-to-end" "the build failed"
elif ((!WEB_OK)); then
    skip "web UI: end-to-end" "the web UI's build failed (the gateway embeds an old web/dist or none)"
else
    step "web UI: end-to-end (Playwright, Chromium)" ui_e2e || true
fi

if ((!BUILD_OK)); then
    skip "security suites" "the build failed"
elif ! step "python venv (target/security-venv)" make_venv "$SECURITY_VENV" tests/security/requirements.txt; then
    skip "security suites" "no venv"
else
    security || true
fi

if ((BUILD_OK)); then
    step "chaos: fault schedule, 2 replicas of every service (deploy/local/chaos.sh)" chaos_run || true
    step "findings: black-box repros (tests/findings/repro.py)" \
        timeout --foreground 600 python3 tests/findings/repro.py "$BIN_DIR/weft" || true
    step "findings: second pass (tests/findings/second_pass.py)" \
        timeout --foreground 900 python3 tests/findings/second_pass.py "$BIN_DIR/weft" || true
else
    skip "chaos" "the build failed"
    skip "findings repros" "the build failed"
fi

summary
if failed; then exit 1; fi
