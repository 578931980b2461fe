#!/usr/bin/env python3
"""loadtest/hooks_latency.py — what a tool-use hook adds to a tool call (docs/hooks.md).

One `weft up` (through tests/harness/fleet.py, fresh database and prefixes) and a hook receiver
in this process (stdlib HTTP server on 127.0.0.1, exempt through executor.http_private_exempt)
that checks each call's Standard Webhooks signature and answers `allow`. Two agents on the mock
model run the same script — TURNS model turns of one `Context` call each — one without hooks
(`plain`) and one with a signed pre hook and a signed post hook on `Context` (`hooked`). Runs go
one at a time, alternating plain / hooked, each started with `stream: true` and read to
`run_finished`. The figure: (median hooked run − median plain run) ÷ tool calls per run, i.e.
one pre call + one post call + the commit of the pre decision, receiver time included.

Python 3.11, standard library only. Timing goals live here, never in tests.

    python3 loadtest/hooks_latency.py --bin target/debug --runs 200 --turns 3
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import hmac
import json
import os
import statistics
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "harness"))
import fleet  # noqa: E402

SECRET = "whsec_" + base64.b64encode(b"hooks-latency-measurement-key-01").decode()
SECRET_ENV = "WEFT_HOOK_DEFAULT__BENCH"


class Receiver(BaseHTTPRequestHandler):
    """Checks the signature, answers allow; counts calls and the time spent in here."""

    calls = 0
    bad = 0
    busy_s = 0.0
    lock = threading.Lock()
    protocol_version = "HTTP/1.1"
    # Headers and body go out in two writes: without TCP_NODELAY, Nagle holds the body until
    # the client's delayed ACK (~40 ms), which would be measured as weft's.
    disable_nagle_algorithm = True

    def do_POST(self):  # noqa: N802 (the stdlib's name)
        t0 = time.perf_counter()
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        key = base64.b64decode(SECRET.removeprefix("whsec_"))
        signed = f"{self.headers['webhook-id']}.{self.headers['webhook-timestamp']}.".encode() + body
        want = "v1," + base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
        ok = hmac.compare_digest(want, self.headers.get("webhook-signature", ""))
        out = b'{"decision":"allow"}'
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)
        with Receiver.lock:
            Receiver.calls += 1
            Receiver.bad += 0 if ok else 1
            Receiver.busy_s += time.perf_counter() - t0

    def log_message(self, *_args):
        pass


def call(url: str, token: str, method: str, path: str, body=None):
    req = urllib.request.Request(url + path, method=method,
                                 data=None if body is None else json.dumps(body).encode(),
                                 headers={"authorization": f"Bearer {token}",
                                          "content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return r.status, json.loads(r.read() or b"null")


def one_run(url: str, token: str, agent: str, script: str) -> float:
    """Seconds from POST /v1/runs (streamed) to its run_finished frame."""
    req = urllib.request.Request(url + "/v1/runs", method="POST",
                                 data=json.dumps({"agent": agent, "input": script, "stream": True}).encode(),
                                 headers={"authorization": f"Bearer {token}",
                                          "content-type": "application/json",
                                          "accept": "text/event-stream"})
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=60) as r:
        event = ""
        for raw in r:
            line = raw.decode().rstrip("\n")
            if line.startswith("event:"):
                event = line.split(":", 1)[1].strip()
            elif line.startswith("data:") and event == "run_finished":
                status = json.loads(line[5:])["data"]["status"]
                if status != "succeeded":
                    raise RuntimeError(f"a {agent} run ended {status}")
                return time.perf_counter() - t0
    raise RuntimeError(f"a {agent} run's stream ended before run_finished")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default=str(ROOT / "target" / "debug"), help="where `weft` is")
    ap.add_argument("--runs", type=int, default=200, help="runs of each agent (after warm-up)")
    ap.add_argument("--warmup", type=int, default=20, help="runs of each agent not counted")
    ap.add_argument("--turns", type=int, default=3, help="model turns (one Context call each) per run")
    args = ap.parse_args()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    hook_url = f"http://127.0.0.1:{server.server_address[1]}/hook"
    logs = ROOT / "target" / "loadtest" / "hooks"
    logs.mkdir(parents=True, exist_ok=True)
    cfg = logs / "hooks.toml"
    cfg.write_text('[executor]\nhttp_private_exempt = ["127.0.0.1/32"]\n')
    with fleet.Fleet(args.bin, name="hooks", config=cfg, env={SECRET_ENV: SECRET},
                     logs_dir=logs) as f:
        for agent in ("plain", "hooked"):
            call(f.url, f.token, "PUT", f"/v1/agents/{agent}", {"model": "mock-1", "tools": ["Context"]})
        for phase in ("pre", "post"):
            call(f.url, f.token, "PUT", f"/v1/hooks/bench-{phase}", {
                "phase": phase, "agents": ["hooked"], "tools": ["Context"], "url": hook_url,
                "secret_env": SECRET_ENV, "fail_mode": "closed"})
        turns = [[{"name": "Context", "input": {"op": "time"}}] for _ in range(args.turns)]
        script = "#mock " + json.dumps({"turns": turns, "reply": "done"})
        times: dict[str, list[float]] = {"plain": [], "hooked": []}
        for i in range(args.warmup + args.runs):
            for agent in ("plain", "hooked"):
                t = one_run(f.url, f.token, agent, script)
                if i >= args.warmup:
                    times[agent].append(t)
    server.shutdown()
    calls = args.turns
    med = {a: statistics.median(v) * 1000 for a, v in times.items()}
    p90 = {a: statistics.quantiles(v, n=10)[-1] * 1000 for a, v in times.items()}
    added = (med["hooked"] - med["plain"]) / calls
    receiver_ms = Receiver.busy_s / max(Receiver.calls, 1) * 1000
    print(f"weft binary: {Path(args.bin).resolve() / 'weft'}")
    print(f"runs: {args.runs} of each agent after {args.warmup} warm-up, {calls} Context calls per run, sequential")
    print(f"plain  run: median {med['plain']:.2f} ms, p90 {p90['plain']:.2f} ms")
    print(f"hooked run: median {med['hooked']:.2f} ms, p90 {p90['hooked']:.2f} ms")
    print(f"added per tool call (one pre + one post hook call, signed): {added:.2f} ms")
    print(f"receiver: {Receiver.calls} calls, {Receiver.bad} bad signatures, {receiver_ms:.3f} ms inside the handler per call")
    return 1 if Receiver.bad else 0


if __name__ == "__main__":
    sys.exit(main())
