#!/usr/bin/env python3
"""Splits a `perf record -g` profile of weft into the stages of a chat request.

    perf record -e cpu-clock -F 999 -g -p <weft pid> -o perf.data -- sleep 10
    perf script -i perf.data | loadtest/perf-stages.py [--requests N]

Each sample is given to one stage: the stage of the frame closest to the leaf that matches a
stage's pattern (so time in serde under the OpenAI driver counts as JSON, not as the driver).
Kernel frames, the allocator and the tokio runtime are looked through: a syscall or a malloc
counts for the stage that made it. A second table says where the samples' leaves were
(kernel, allocator, user code). With --requests (how many requests the profiled window
served), each stage is also given in microseconds per request, assuming the sampling
frequency given with --freq (default 999 Hz).
"""

import argparse
import re
import sys
from collections import Counter

# Checked in order; the first pattern a frame matches names its stage.
STAGES = [
    ("logging/tracing", r"tracing_subscriber|tracing_core|tracing::span|opentelemetry"),
    ("metrics", r"metrics_exporter_prometheus|metrics::|weft_telemetry::handles"),
    ("usage (NATS)", r"async_nats|weft_bus::|accounting::"),
    ("JSON encode", r"serde_json::ser|serde_json::value::ser|Serialize"),
    ("JSON decode", r"serde_json::de|serde_json::value::de|Deserialize|serde::de"),
    ("auth", r"weft_auth|BearerAuth|TokenResolver|sha2|jsonwebtoken"),
    ("protobuf/gRPC", r"prost::|tonic::|weft_proto::"),
    ("provider call (HTTP client)", r"reqwest::|hyper_util::client|hyper::client|weft_router::providers"),
    ("routing", r"weft_router::routing|weft_router::grpc"),
    ("HTTP server", r"hyper::proto|hyper::server|axum::|tower_http|tower::"),
    ("gateway doors", r"weft_gateway::"),
    ("allocator", r"malloc|_int_free|\bfree\b|cfree|realloc|memcpy|memmove"),
    ("tokio runtime", r"tokio::runtime|tokio::sync|tokio::io|mio::"),
]
COMPILED = [(name, re.compile(p)) for name, p in STAGES]


def samples(lines):
    frames = []
    for line in lines:
        line = line.rstrip("\n")
        if not line.strip():
            if frames:
                yield frames
            frames = []
            continue
        if line.startswith((" ", "\t")):
            frames.append(line.strip())
        else:
            if frames:
                yield frames
            frames = []
    if frames:
        yield frames


ALLOCATOR = re.compile(r"^\S+ (malloc|free|realloc|calloc|cfree|_int_malloc|_int_free|__libc_|memcpy|memmove|memset|__memcpy|__memmove|__memset)")
TRANSPARENT = ("allocator", "tokio runtime")


def leaf_kind(frames):
    if not frames:
        return "user"
    if "[kernel" in frames[0]:
        return "kernel"
    if ALLOCATOR.search(frames[0]) or "malloc" in frames[0] or "_int_free" in frames[0]:
        return "allocator"
    return "user"


def stage_of(frames):
    """The stage of the frame closest to the leaf that names one; kernel frames, the allocator
    and the tokio runtime are looked through, so their time goes to the stage that caused it."""
    fallback = None
    # hyper's HTTP/1 code (`hyper::proto`) runs both weft's server connections and the provider
    # client's connections; a stack under the client's dispatcher is the provider call.
    client_task = any("dispatch::Client<" in f for f in frames)
    for f in frames:  # leaf first
        if "[kernel" in f:
            continue
        for name, pat in COMPILED:
            if pat.search(f):
                if name in TRANSPARENT:
                    fallback = fallback or name
                    break
                if name == "HTTP server" and client_task:
                    return "provider call (HTTP client)"
                return name
    return fallback or ("kernel (no user frame)" if frames and "[kernel" in frames[0] else "other")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, help="requests served in the profiled window")
    ap.add_argument("--freq", type=float, default=999.0, help="sampling frequency (Hz)")
    args = ap.parse_args()
    counts = Counter()
    leaves = Counter()
    for s in samples(sys.stdin):
        counts[stage_of(s)] += 1
        leaves[leaf_kind(s)] += 1
    total = sum(counts.values())
    if not total:
        sys.exit("no samples on standard input (pipe `perf script` into this)")
    print("| stage | share of weft's CPU |" + (" µs per request |" if args.requests else ""))
    print("|---|---:|" + ("---:|" if args.requests else ""))
    for name, n in counts.most_common():
        row = f"| {name} | {100 * n / total:.1f}% |"
        if args.requests:
            row += f" {n / args.freq * 1e6 / args.requests:.1f} |"
        print(row)
    print()
    print("Where the CPU was when sampled (across all stages):")
    print()
    print("| leaf | share |")
    print("|---|---:|")
    for name, n in leaves.most_common():
        print(f"| {name} | {100 * n / total:.1f}% |")
    print(f"\n{total} samples")


if __name__ == "__main__":
    main()
