#!/usr/bin/env bash
# deploy/local/cluster.sh — the multi-replica topology of docker-compose.yaml without containers.
#
#   deploy/local/cluster.sh [--replicas N]
#
# N replicas (default 2) of every service (gateway, router, substrate, mcp-bridge, ingress,
# executor) as separate processes on loopback ports, the gateway and the gRPC services each behind
# a local load balancer, on a Postgres cluster, Redis and NATS of their own under
# target/chaos/<stamp>/. Prints the gateway's URL and an admin token; Ctrl-C stops everything.
# WEFT_BIN_DIR: the binaries (default target/debug, built here unless SKIP_BUILD=1).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
# shellcheck source=deploy/local/deps.sh
source deploy/local/deps.sh
ensure_deps

BIN_DIR=${WEFT_BIN_DIR:-target/debug}
if [[ ${SKIP_BUILD:-0} != 1 ]]; then
    cargo build --locked -p weft -p weft-gateway -p weft-router -p weft-executor -p weft-substrate \
        -p weft-ingress -p weft-mcp-bridge -p weft-chaos --bins
fi
exec "$BIN_DIR/weft-chaos" --bin-dir "$BIN_DIR" "$@" cluster
