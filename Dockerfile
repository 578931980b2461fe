# syntax=docker/dockerfile:1.7
#
# weft's container image: every service binary in one small image, the binary chosen by the
# first argument (deploy/docker/entrypoint.sh):
#
#   docker build -t weft:local .
#   docker run --rm weft:local gateway --help      # weft-gateway
#   docker run --rm weft:local migrate             # weft migrate (any other word: the weft CLI)
#
# Stages: `web` builds the UI (web/dist), which the gateway embeds at compile time
# (services/gateway/src/ui.rs); `build` compiles the release binaries; `runtime` is
# debian:bookworm-slim with ca-certificates and curl (health checks), running as uid 10001.
# docs/deploy.md describes the image; deploy/check.sh checks this file against the workspace.

ARG RUST_VERSION=1.95
ARG NODE_VERSION=22
ARG DEBIAN_RELEASE=bookworm

# --- the web UI (Vite 7 needs Node 20.19+ or 22.12+) --------------------------------------------
FROM node:${NODE_VERSION}-${DEBIAN_RELEASE}-slim AS web
WORKDIR /src/web
# @playwright/test is a dev dependency for the end-to-end tests; no browser is needed here.
ENV PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 \
    npm_config_audit=false \
    npm_config_fund=false \
    npm_config_update_notifier=false
COPY web/package.json web/package-lock.json ./
RUN --mount=type=cache,target=/root/.npm npm ci
COPY web/ ./
# Typecheck + `vite build` into /src/web/dist.
RUN npm run build && test -f dist/index.html

# --- the Rust binaries -------------------------------------------------------------------------
FROM rust:${RUST_VERSION}-${DEBIAN_RELEASE} AS build
# aws-lc-sys (rustls' crypto provider) may fall back to CMake; protoc comes from
# protoc-bin-vendored, jemalloc builds with the image's C toolchain.
# Debian's versions move within a release; the base image tag pins the release.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends cmake \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
# Every workspace member must be present for cargo to load the workspace, even the ones not
# built here (loadtest, the test crates under tests/); proto/ and migrations/ are read at compile
# time (shared/proto/build.rs, sqlx::migrate!).
COPY Cargo.toml Cargo.lock ./
COPY proto/ proto/
COPY migrations/ migrations/
COPY shared/ shared/
COPY services/ services/
COPY loadtest/ loadtest/
COPY tests/ tests/
# The gateway embeds ../../web/dist (relative to services/gateway).
COPY --from=web /src/web/dist/ web/dist/
# The binaries of the image: each one a [[bin]] of the workspace (deploy/check.sh checks it).
ARG WEFT_BINS="weft weft-gateway weft-router weft-executor weft-substrate weft-ingress weft-mcp-bridge"
# $bins is split into `--bin NAME` words on purpose.
# hadolint ignore=SC2086
RUN --mount=type=cache,target=/usr/local/cargo/registry,sharing=locked \
    --mount=type=cache,target=/usr/local/cargo/git,sharing=locked \
    --mount=type=cache,target=/src/target,sharing=locked \
    set -eu; \
    bins=""; for b in $WEFT_BINS; do bins="$bins --bin $b"; done; \
    cargo build --release --locked $bins; \
    mkdir -p /out; \
    for b in $WEFT_BINS; do cp "target/release/$b" /out/; done

# --- the runtime image -------------------------------------------------------------------------
FROM debian:${DEBIAN_RELEASE}-slim AS runtime
# ca-certificates: provider and MCP server TLS; curl: the HTTP health checks of compose files.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates curl \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 weft \
    && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/weft --create-home \
        --shell /usr/sbin/nologin weft \
    && install -d -o weft -g weft /var/lib/weft/usage-spool
COPY --from=build /out/ /usr/local/bin/
COPY --chmod=0755 deploy/docker/entrypoint.sh /usr/local/bin/weft-entrypoint
# A numeric user, so Kubernetes' runAsNonRoot can verify it.
USER 10001:10001
WORKDIR /var/lib/weft
# gateway 8787 (HTTP), router 8788, substrate 8789, mcp-bridge 8790 (gRPC), ingress 8791 (HTTP),
# metrics of the router and executor (when *.metrics_listen is set) 9090.
EXPOSE 8787 8788 8789 8790 8791 9090
ENTRYPOINT ["/usr/local/bin/weft-entrypoint"]
CMD ["--help"]
