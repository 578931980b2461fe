#!/usr/bin/env python3
"""loadtest/long_runs_latency.py — what a compaction takes, and what a code agent's turn costs
next to a model's (docs/runs.md "Long runs", docs/code-agents.md).

One `weft up` (through tests/harness/fleet.py, fresh database and prefixes) with the embedded
mock provider.

- compaction: one interactive run of agent `compacting` (mock model, `keep_turns: 1`). Each
  round sends one input (a model turn; the run parks again) and then `POST …/compact` (the
  run parks again once the summary — a call to the mock model — and its `context_compacted`
  are committed). Each is timed from the request to the `awaiting_input` that follows it on the
  run's stream, opened before the request. Figures: the median compaction and the median model
  turn; an automatic compaction adds the former to the turn it precedes.
- code agents: runs of a code agent and of a model agent making the same CALLS `Context` calls
  (the model agent's mock script makes them one per turn), one at a time, alternating, each
  started with `stream: true` and read to `run_finished`. Figures: the medians, and the
  difference per call. The executor's CPU per run is read from /proc before and after each
  batch.

Python 3.11, standard library only. Timing goals live here, never in tests.

    python3 loadtest/long_runs_latency.py --bin target/release --rounds 100 --runs 150
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "harness"))
import fleet  # noqa: E402

sys.path.insert(0, str(ROOT / "loadtest"))
from hooks_latency import call, one_run  # noqa: E402


def stream(url: str, token: str, run: str, from_seq: int):
    req = urllib.request.Request(f"{url}/v1/runs/{run}/stream?from_seq={from_seq}",
                                 headers={"authorization": f"Bearer {token}",
                                          "accept": "text/event-stream"})
    return urllib.request.urlopen(req, timeout=60)


def until(resp, kind: str) -> int:
    """Reads SSE frames until one of `kind`; its seq."""
    event, seq = "", 0
    for raw in resp:
        line = raw.decode().rstrip("\n")
        if line.startswith("id:"):
            seq = int(line[3:].strip())
        elif line.startswith("event:"):
            event = line.split(":", 1)[1].strip()
        elif line == "" and event == kind:
            return seq
    raise RuntimeError(f"the stream ended before {kind}")


def timed(url: str, token: str, run: str, last: int, method: str, path: str, body):
    """Seconds from the request to the next `awaiting_input`, and its seq."""
    with stream(url, token, run, last + 1) as s:
        t0 = time.perf_counter()
        call(url, token, method, path, body)
        seq = until(s, "awaiting_input")
        return time.perf_counter() - t0, seq


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of process `pid` and its children so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = sum(int(fields[i]) for i in (11, 12, 13, 14))
    return ticks / os.sysconf("SC_CLK_TCK")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default=str(ROOT / "target" / "debug"), help="where `weft` is")
    ap.add_argument("--rounds", type=int, default=100, help="compaction rounds (after warm-up)")
    ap.add_argument("--runs", type=int, default=150, help="runs of each agent (after warm-up)")
    ap.add_argument("--warmup", type=int, default=10, help="rounds / runs not counted")
    ap.add_argument("--calls", type=int, default=3, help="Context calls per run")
    args = ap.parse_args()

    logs = ROOT / "target" / "loadtest" / "long-runs"
    logs.mkdir(parents=True, exist_ok=True)
    with fleet.Fleet(args.bin, name="long-runs", logs_dir=logs) as f:
        pid = next(iter(f.procs.values())).popen.pid
        call(f.url, f.token, "PUT", "/v1/agents/compacting", {
            "model": "mock-1", "max_iterations": 1000,
            "compaction": {"keep_turns": 1, "window_tokens": 100000}})
        _, run = call(f.url, f.token, "POST", "/v1/runs", {
            "agent": "compacting", "interactive": True, "input": "hello"})
        run = run["run_id"]
        with stream(f.url, f.token, run, 1) as s:
            last = until(s, "awaiting_input")
        turns, compactions = [], []
        for i in range(args.warmup + args.rounds):
            t, last = timed(f.url, f.token, run, last, "POST", f"/v1/runs/{run}/input",
                            {"text": f"round {i}: " + "some words " * 50})
            c, last = timed(f.url, f.token, run, last, "POST", f"/v1/runs/{run}/compact", None)
            if i >= args.warmup:
                turns.append(t)
                compactions.append(c)
        call(f.url, f.token, "POST", f"/v1/runs/{run}/cancel")

        calls = [[{"name": "Context", "input": {"op": "time"}}] for _ in range(args.calls)]
        script = "#mock " + json.dumps({"turns": calls, "reply": "done"})
        call(f.url, f.token, "PUT", "/v1/agents/model", {"model": "mock-1", "tools": ["Context"]})
        call(f.url, f.token, "PUT", "/v1/agents/code", {"tools": ["Context"], "code": {
            "source": f"function main(i) {{ for (let k = 0; k < {args.calls}; k++) "
                      "tools.Context({op: 'time'}); return 'done'; }"}})
        times: dict[str, list[float]] = {"model": [], "code": []}
        cpu: dict[str, float] = {"model": 0.0, "code": 0.0}
        for agent, text in (("model", script), ("code", "go")):
            for _ in range(args.warmup):
                one_run(f.url, f.token, agent, text)
        for _ in range(args.runs):
            for agent, text in (("model", script), ("code", "go")):
                c0 = cpu_s(pid)
                times[agent].append(one_run(f.url, f.token, agent, text))
                cpu[agent] += cpu_s(pid) - c0

    med = lambda v: statistics.median(v) * 1000  # noqa: E731
    p90 = lambda v: statistics.quantiles(v, n=10)[-1] * 1000  # noqa: E731
    print(f"weft binary: {Path(args.bin).resolve() / 'weft'}")
    print(f"compaction: {args.rounds} rounds after {args.warmup} warm-up, one run, keep_turns 1")
    print(f"  model turn  (POST input -> awaiting_input):   median {med(turns):.2f} ms, p90 {p90(turns):.2f} ms")
    print(f"  compaction  (POST compact -> awaiting_input): median {med(compactions):.2f} ms, p90 {p90(compactions):.2f} ms")
    print(f"code agents: {args.runs} runs of each after {args.warmup} warm-up, {args.calls} Context calls per run, sequential")
    for agent in ("model", "code"):
        print(f"  {agent:5} run: median {med(times[agent]):.2f} ms, p90 {p90(times[agent]):.2f} ms, "
              f"weft CPU {cpu[agent] / args.runs * 1000:.2f} ms per run")
    diff = (med(times["code"]) - med(times["model"])) / args.calls
    print(f"  code - model, per call: {diff:+.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
