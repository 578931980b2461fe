#!/usr/bin/env bash
# deploy/local/chaos.sh — the fleet under fire (docs/reliability.md).
#
#   deploy/local/chaos.sh [DURATION] [weft-chaos run flags…]
#
# Starts 2 replicas of every service (gateway, router, substrate, mcp-bridge, ingress, executor)
# as separate processes behind local load balancers, on a Postgres cluster, Redis and NATS of
# their own (under target/chaos/<stamp>/, so restarting them disturbs nothing else here), holds a
# steady mixed load (chat, streams, runs with tools and sub-runs, interactive runs, cancels, memory
# writes, channel publishes, schedule fires, signed webhooks, a tenant loaded past its quota,
# tenant-isolation probes) while killing a random replica every 5 s and, in every 5-minute cycle,
# restarting Redis, NATS and Postgres in turn, freezing an executor past its lease and
# partitioning an executor and a gateway replica (each in a network namespace of its own, when
# run as root; --no-partition keeps every replica on loopback), then lets the fleet settle and
# checks the final state. It prints the load held, the faults by kind and the violations, and
# exits 1 on any violation.
#
# DURATION: 120s by default (test.sh's default suite); WEFT_CHAOS=1 makes it 10m (test.sh's long
# tier); anything `weft-chaos run --duration` takes (90s, 10m, 1h). WEFT_BIN_DIR: the binaries
# (default target/debug, built here unless SKIP_BUILD=1). Logs stay in target/chaos/<stamp>/logs.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
# shellcheck source=deploy/local/deps.sh
source deploy/local/deps.sh
ensure_deps # installs postgres, redis-server and nats-server when missing

if [[ ${WEFT_CHAOS:-0} == 1 ]]; then default=10m; else default=120s; fi
duration=${1:-$default}
shift || true
BIN_DIR=${WEFT_BIN_DIR:-target/debug}
if [[ ${SKIP_BUILD:-0} != 1 ]]; then
    cargo build --locked -p weft -p weft-gateway -p weft-router -p weft-executor -p weft-substrate \
        -p weft-ingress -p weft-mcp-bridge -p weft-chaos --bins
fi
exec "$BIN_DIR/weft-chaos" --bin-dir "$BIN_DIR" run --duration "$duration" "$@"
