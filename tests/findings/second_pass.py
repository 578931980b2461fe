#!/usr/bin/env python3
"""Black-box repros of the eleven findings of the second security pass.

The same shape as repro.py (whose `Weft` it reuses): each check starts its own `weft up` (fresh
database, own NATS/Redis prefixes, loopback ports) from the binary given, drives it over HTTP
only — with small local servers standing in for an MCP server and an OpenAI-compatible provider
where a finding needs one — and prints `ok` or `FAILED` with what it saw:

    python3 tests/findings/second_pass.py target/debug/weft            # exit 0 when all hold
    python3 tests/findings/second_pass.py /path/to/old/weft --expect-fail

Run against a build of 6f9f6e3 (before the fixes), every check fails. Settings only the fixed
build knows are passed only when the findings are expected to hold (as repro.py's f7_streams
does); every check is built so that the old build fails it with its defaults.

Only the standard library; Postgres at 127.0.0.1:5432 (trust), Redis and NATS must be running.
"""

import hashlib
import hmac
import http.server
import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import repro  # noqa: E402
from repro import SLOW_MODELS, Weft, mock  # noqa: E402

# Loopback MCP servers are private addresses: the bridge dials them only when exempted.
EXEMPT_LOOPBACK = '\n[mcp_bridge]\nprivate_exempt = ["127.0.0.0/8"]\n'


class LoggedWeft(Weft):
    """A `weft up` whose standard output and standard error are both kept, read as they come
    (a log at `info` would otherwise fill the pipe and stall the process)."""

    stderr = subprocess.STDOUT

    def start(self):
        super().start()
        self.drain = threading.Thread(target=self._drain, daemon=True)
        self.drain.start()
        return self

    def _drain(self):
        for line in self.proc.stdout:
            self.printed.append(line)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if getattr(self, "drain", None):
            self.drain.join(10)
        return "".join(self.printed)


def fetch(url, method="GET", body=None, headers=None, timeout=60):
    """(status, headers, text) of one request with exactly these headers (no bearer token
    unless given)."""
    data = body.encode() if isinstance(body, str) else body
    req = urllib.request.Request(url, data=data, method=method)
    for k, v in (headers or {}).items():
        req.add_header(k, v)
    try:
        resp = urllib.request.urlopen(req, timeout=timeout)
    except urllib.error.HTTPError as e:
        resp = e
    return resp.status, resp.headers, resp.read().decode(errors="replace")


def as_json(text):
    try:
        return json.loads(text)
    except ValueError:
        return text


def describe(line):
    """`LEVEL target` of a JSON log line, or its start."""
    parsed = as_json(line)
    if isinstance(parsed, dict) and "level" in parsed:
        return f"{parsed['level']} {parsed.get('target')}"
    return line.strip()[:100]


def mint(w, subject, scopes, tenant=None):
    body = {"name": subject, "subject": subject, "scopes": scopes}
    if tenant:
        body["tenant"] = tenant
    s, _, r = w.call("POST", "/v1/tokens", body)
    assert s == 201, (s, r)
    return r["token"]


def mcp_initialize(w, token, extra=None):
    """One MCP `initialize` on weft's /mcp (2025-11-25, streamable HTTP): (status, headers)."""
    headers = {"authorization": "Bearer " + token, "content-type": "application/json",
               "accept": "application/json, text/event-stream",
               "mcp-protocol-version": "2025-11-25", **(extra or {})}
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "second-pass", "version": "1"}}})
    s, h, _ = fetch(w.url + "/mcp", "POST", body, headers, timeout=30)
    return s, h


def secret_env(name, new):
    """The variable holding webhook `name`'s secret in tenant `default`: the tenant-scoped
    `WEFT_WEBHOOK_DEFAULT__<NAME>`. The old build reads every `WEFT_<A>__<B>` variable as config
    and refuses to start on an unknown section, so it gets a single underscore (its receiver
    takes any `WEFT_WEBHOOK_` name)."""
    return f"WEFT_WEBHOOK_DEFAULT__{name}" if new else f"WEFT_WEBHOOK_DEFAULT_{name}"


def sign(secret, body):
    return hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def until(probe, secs):
    """Calls `probe` (a request, which paces the loop itself) until it holds or `secs` pass."""
    deadline = time.monotonic() + secs
    while time.monotonic() < deadline:
        if probe():
            return True
    return False


class Local:
    """A threaded HTTP server on 127.0.0.1 with `handler` (a BaseHTTPRequestHandler class)."""

    def __init__(self, handler):
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class Quiet(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def body(self):
        n = int(self.headers.get("content-length") or 0)
        return self.rfile.read(n) if n else b""

    def answer(self, status, body=b"", ctype="application/json", headers=None):
        self.send_response(status)
        self.send_header("content-type", ctype)
        self.send_header("content-length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)


def refusing_mcp(state):
    """An 'MCP server' that answers every request 401 with a body quoting the X-Api-Key it got."""

    class H(Quiet):
        def refuse(self):
            self.body()
            key = self.headers.get("x-api-key", "")
            state["hits"] += 1
            state["hit"].set()
            self.answer(401, json.dumps({"error": f"invalid api key {key}"}).encode())

        do_POST = do_GET = do_DELETE = refuse

    return H


def echoing_mcp(state):
    """A minimal streamable-HTTP MCP server (JSON answers) whose one tool quotes the X-Api-Key
    it received in its description and in its schema."""

    class H(Quiet):
        def do_GET(self):
            self.answer(405)

        def do_DELETE(self):
            self.answer(200)

        def do_POST(self):
            msg = json.loads(self.body() or b"{}")
            key = self.headers.get("x-api-key", "")
            state["hits"] += 1
            if "id" not in msg:  # a notification
                self.answer(202)
                return
            method = msg.get("method")
            if method == "initialize":
                result = {"protocolVersion": msg.get("params", {}).get("protocolVersion",
                                                                       "2025-11-25"),
                          "capabilities": {"tools": {}},
                          "serverInfo": {"name": "echo-key", "version": "1"}}
            elif method == "tools/list":
                state["listed"] += 1
                result = {"tools": [{
                    "name": "lookup",
                    "description": f"Looks things up; this session's key is {key}.",
                    "inputSchema": {"type": "object", "properties": {
                        "q": {"type": "string", "description": f"a query (key {key})"}}}}]}
            elif method == "ping":
                result = {}
            else:
                body = {"jsonrpc": "2.0", "id": msg["id"],
                        "error": {"code": -32601, "message": "method not found"}}
                self.answer(200, json.dumps(body).encode())
                return
            body = {"jsonrpc": "2.0", "id": msg["id"], "result": result}
            self.answer(200, json.dumps(body).encode(), headers={"mcp-session-id": "s-1"})

    return H


def capturing_openai(bodies):
    """An OpenAI-compatible chat completions server that keeps every request body and answers
    `done` (streamed as SSE chunks when asked)."""

    class H(Quiet):
        def do_POST(self):
            raw = self.body()
            bodies.append(raw.decode(errors="replace"))
            req = as_json(raw.decode(errors="replace"))
            usage = {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}
            base = {"id": "chatcmpl-1", "created": 0, "model": "m"}
            if isinstance(req, dict) and req.get("stream"):
                chunks = [
                    {**base, "object": "chat.completion.chunk", "choices": [{
                        "index": 0, "delta": {"role": "assistant", "content": "done"},
                        "finish_reason": None}]},
                    {**base, "object": "chat.completion.chunk", "choices": [{
                        "index": 0, "delta": {}, "finish_reason": "stop"}]},
                    {**base, "object": "chat.completion.chunk", "choices": [], "usage": usage},
                ]
                text = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
                self.answer(200, text.encode(), "text/event-stream")
            else:
                body = {**base, "object": "chat.completion", "usage": usage, "choices": [{
                    "index": 0, "message": {"role": "assistant", "content": "done"},
                    "finish_reason": "stop"}]}
                self.answer(200, json.dumps(body).encode())

    return H


# --- the findings ----------------------------------------------------------------------------

def w1_webhook_replay(bin_, new):
    secret, env = "whsec-" + secrets.token_hex(16), secret_env("GH", new)
    w = Weft(bin_, env={env: secret}).start()
    try:
        w.agent("wh", {"model": "mock-1"})
        s, _, r = w.call("PUT", "/v1/webhooks/gh", {
            "agent": "wh", "signature": "github", "secret_env": env})
        assert s in (200, 201), (s, r)
        body = json.dumps({"action": "opened", "nonce": secrets.token_hex(4)}).encode()
        signed = {"content-type": "application/json",
                  "x-hub-signature-256": "sha256=" + sign(secret, body)}
        answers = []
        for delivery in ("d-1", "d-2", "d-3", None):
            headers = dict(signed, **({"x-github-delivery": delivery} if delivery else {}))
            s, _, text = fetch(f"{w.url}/v1/_webhooks/default/gh", "POST", body, headers)
            answers.append((s, as_json(text)))
        runs = {a.get("run_id") for _, a in answers if isinstance(a, dict)} - {None}
        later = answers[1:]
        good = (len(runs) == 1 and answers[0][0] == 202
                and all(s == 200 and isinstance(a, dict) and a.get("replayed") is True
                        for s, a in later))
        seen = [(s, a.get("replayed") if isinstance(a, dict) else a) for s, a in answers]
        return (good, f"one signed body, 4 deliveries -> {len(runs)} distinct runs; "
                      f"(status, replayed) {seen}")
    finally:
        w.close()


def c1_credential_in_logs(bin_, new):
    state = {"hits": 0, "hit": threading.Event()}
    srv = Local(refusing_mcp(state))
    w = LoggedWeft(bin_, config=SLOW_MODELS + EXEMPT_LOOPBACK)
    w.env["WEFT_TELEMETRY__LOG_LEVEL"] = "info"
    w.start()
    try:
        s, _, r = w.call("PUT", "/v1/mcp-servers/refuser", {
            "url": f"http://127.0.0.1:{srv.port}/mcp",
            "headers": {"X-Api-Key": "${run.credentials.key}"}})
        assert s in (200, 201), (s, r)
        w.agent("c1", {"model": "mock-1", "mcp_servers": ["refuser"],
                       "tools": ["mcp__refuser__*"]})
        key = secrets.token_hex(16)
        s, _, r = w.call("POST", "/v1/runs", {"agent": "c1", "input": mock([], "nothing to call"),
                                              "credentials": {"key": key}})
        assert s == 201, (s, r)
        status = w.wait_run(r["run_id"], 45)["status"]
        hit = state["hit"].wait(5)
        out = w.stop()
        lines = [line for line in out.splitlines() if key in line]
        where = sorted({describe(line) for line in lines})
        return (hit and not lines,
                f"run {status}; server hit {state['hits']}x; {len(out.splitlines())} lines "
                f"captured, {len(lines)} with the credential, from {where}")
    finally:
        w.close()
        srv.close()


def m1_mcp_session_cap(bin_, new):
    w = Weft(bin_).start()
    try:
        token = mint(w, "m1", ["llm:call"])
        other = mint(w, "m1-other", ["llm:call"])
        answers = [mcp_initialize(w, token) for _ in range(40)]
        statuses = [s for s, _ in answers]
        limited = [h.get("retry-after") for s, h in answers if s == 429]
        then = mcp_initialize(w, other)[0]
        good = bool(limited) and all(limited) and then == 200
        return (good, f"40 initializes of one principal -> {statuses.count(200)}x 200, "
                      f"{len(limited)}x 429 (Retry-After {limited[:1]}), others "
                      f"{sorted(set(statuses) - {200, 429})}; another principal's -> {then}")
    finally:
        w.close()


def ch1_consumer_impersonation(bin_, new):
    w = Weft(bin_).start()
    try:
        s, _, r = w.call("PUT", "/v1/channels/jobs", {"scope": "tenant"})
        assert s in (200, 201), (s, r)
        for i in range(3):
            s, _, r = w.call("POST", "/v1/channels/jobs/publish", {"payload": {"n": i}})
            assert s == 201, (s, r)
        reader = mint(w, "reader", ["channels:read"])
        got = {}
        for label, body in (("bot", {"consumer": "bot"}), ("own", {}),
                            ("reader/jobs", {"consumer": "reader/jobs"})):
            got[label] = w.call("POST", "/v1/channels/jobs/read", body, token=reader)[0]
        good = got == {"bot": 403, "own": 200, "reader/jobs": 200}
        return (good, f"a channels:read token (subject reader) reading as consumer -> {got}")
    finally:
        w.close()


def ch2_waiter_pool(bin_, new):
    w = Weft(bin_, env={"WEFT_SUBSTRATE__MAX_CHANNEL_WAITERS": "8"}).start()
    try:
        s, _, r = w.call("PUT", "/v1/channels/quiet", {"scope": "tenant"})
        assert s in (200, 201), (s, r)
        a = mint(w, "alice", ["channels:read"])
        b = mint(w, "bob", ["tenant:admin"], tenant="other")
        s, _, r = w.call("PUT", "/v1/channels/inbox", {"scope": "tenant"}, token=b)
        assert s in (200, 201), (s, r)
        finished = []
        stop_at = time.monotonic() + 25

        def hold():
            # A 503 (the pool) or 429 (A's share of it) here can only be the pool briefly full
            # with the probe below, or with a hold refused a moment ago: try again, so that all
            # eight end up waiting and the probe then meets a full share.
            while True:
                s = w.call("POST", "/v1/channels/quiet/read", {"wait_ms": 20000}, token=a)[0]
                if s not in (429, 503) or time.monotonic() > stop_at:
                    finished.append(s)
                    return

        threads = [threading.Thread(target=hold, daemon=True) for _ in range(8)]
        for t in threads:
            t.start()
        probes = []

        def a_refused():
            probes.append(w.call("POST", "/v1/channels/quiet/read", {"wait_ms": 1}, token=a)[0])
            return probes[-1] != 200

        in_flight = until(a_refused, 15)
        s_b = w.call("POST", "/v1/channels/inbox/read", {"wait_ms": 500}, token=b)[0]
        # Wake A's long-polls so that they end now.
        w.call("POST", "/v1/channels/quiet/publish", {"payload": "wake"})
        for t in threads:
            t.join(25)
        good = in_flight and probes[-1] == 429 and s_b == 200
        return (good, f"A's extra read once its 8 long-polls were sent -> {probes[-1]}; "
                      f"another tenant's read -> {s_b}; A's long-polls ended "
                      f"{sorted(finished)}")
    finally:
        w.close()


def c2_credential_to_model(bin_, new):
    state = {"hits": 0, "listed": 0}
    mcp_srv = Local(echoing_mcp(state))
    bodies = []
    model_srv = Local(capturing_openai(bodies))
    provider = (f'\n[router.providers.cap]\nkind = "openai"\n'
                f'base_url = "http://127.0.0.1:{model_srv.port}/v1"\nmodels = ["m"]\n')
    w = Weft(bin_, config=SLOW_MODELS + provider + EXEMPT_LOOPBACK).start()
    try:
        s, _, r = w.call("PUT", "/v1/mcp-servers/echokey", {
            "url": f"http://127.0.0.1:{mcp_srv.port}/mcp",
            "headers": {"X-Api-Key": "${run.credentials.key}"}})
        assert s in (200, 201), (s, r)
        w.agent("c2", {"model": "cap/m", "mcp_servers": ["echokey"],
                       "tools": ["mcp__echokey__*"]})
        key = secrets.token_hex(16)
        s, _, r = w.call("POST", "/v1/runs", {"agent": "c2", "input": "look something up",
                                              "credentials": {"key": key}})
        assert s == 201, (s, r)
        status = w.wait_run(r["run_id"], 45)["status"]
        leaked = sum(key in b for b in bodies)
        with_tool = sum("lookup" in b for b in bodies)
        good = bool(bodies) and leaked == 0
        return (good, f"run {status}; MCP tools/list x{state['listed']}; {len(bodies)} model "
                      f"requests, {with_tool} listing the tool, {leaked} carrying the credential")
    finally:
        w.close()
        mcp_srv.close()
        model_srv.close()


def c3_credential_shapes(bin_, new):
    w = Weft(bin_).start()
    try:
        w.agent("plain", {"model": "mock-1"})
        got = []
        for value in ("x", "pässwörd-long-enough", "abcdefgh12345678"):
            s, _, r = w.call("POST", "/v1/runs", {"agent": "plain", "input": "hi",
                                                  "credentials": {"k": value}})
            param = (r.get("error") or {}).get("param") if isinstance(r, dict) else None
            got.append((s, param))
        good = (all(s == 400 and "credentials" in (p or "") for s, p in got[:2])
                and got[2][0] == 201)
        return (good, f"credential 'x' / non-ASCII / 16 ASCII chars -> (status, param) {got}")
    finally:
        w.close()


def w2_webhook_secret_namespace(bin_, new):
    w = Weft(bin_).start()
    try:
        w.agent("wh", {"model": "mock-1"})
        got = {}
        for i, env in enumerate(("HOME", "WEFT_DATABASE__URL", "WEFT_WEBHOOK_OTHER__X",
                                 "WEFT_WEBHOOK_DEFAULT__X")):
            got[env] = w.call("PUT", f"/v1/webhooks/w2-{i}", {
                "agent": "wh", "signature": "hmac-sha256", "secret_env": env})[0]
        good = (list(got.values())[:3] == [400, 400, 400]
                and got["WEFT_WEBHOOK_DEFAULT__X"] in (200, 201))
        return (good, f"secret_env -> {got}")
    finally:
        w.close()


def w3_triage_flush(bin_, new):
    secret, env = "whsec-" + secrets.token_hex(16), secret_env("W3", new)
    w = Weft(bin_, env={env: secret}).start()
    try:
        w.agent("wh", {"model": "mock-1"})
        s, _, r = w.call("PUT", "/v1/webhooks/w3", {
            "agent": "wh", "signature": "hmac-sha256", "secret_env": env})
        assert s in (200, 201), (s, r)
        url = f"{w.url}/v1/_webhooks/default/w3"
        body = json.dumps({"event": "real"}).encode()
        first = fetch(url, "POST", body, {"content-type": "application/json",
                                          "x-signature": sign(secret, body)})[0]
        refused = set()
        for i in range(60):
            junk = json.dumps({"event": f"forged {i}"}).encode()
            refused.add(fetch(url, "POST", junk, {"content-type": "application/json",
                                                  "x-signature": "00" * 32})[0])
        s, _, log = w.call("GET", "/v1/webhooks/w3/deliveries")
        assert s == 200, (s, log)
        verdicts = [d.get("verdict") for d in log.get("data", [])]
        rejected = log.get("rejected")
        unauthorized = rejected.get("unauthorized", 0) if isinstance(rejected, dict) else 0
        good = first == 202 and "accepted" in verdicts and unauthorized >= 60
        return (good, f"signed delivery -> {first}, 60 forged -> {sorted(refused)}; log lists "
                      f"{len(verdicts)} ({verdicts.count('accepted')} accepted); "
                      f"rejected: {unauthorized if isinstance(rejected, dict) else None} "
                      f"unauthorized")
    finally:
        w.close()


def ch3_op_key_preclaim(bin_, new):
    w = Weft(bin_).start()
    try:
        for name in ("go", "out"):
            s, _, r = w.call("PUT", f"/v1/channels/{name}", {"scope": "tenant"})
            assert s in (200, 201), (s, r)
        w.agent("pub", {"model": "mock-1", "tools": ["Channel"],
                        "channels": {"publish": ["out"], "subscribe": ["go"]}})
        mallory = mint(w, "mallory", ["channels:publish"])
        # Turn 0 waits for a message on `go`, turn 1 publishes: the mock names the calls of
        # turn n `call_<n>_<i>`, so the publish's op key is `<run_id>:call_1_0`.
        run = w.run({"agent": "pub", "input": mock([
            [{"name": "Channel", "input": {"op": "read", "channel": "go", "wait_ms": 20000}}],
            [{"name": "Channel", "input": {"op": "publish", "channel": "out",
                                           "payload": {"from": "run"}}}]], "done")})
        pre = w.call("POST", "/v1/channels/out/publish",
                     {"payload": {"from": "mallory"}, "op_key": f"{run}:call_1_0"},
                     token=mallory)
        s, _, r = w.call("POST", "/v1/channels/go/publish", {"payload": "go"})
        assert s == 201, (s, r)
        status = w.wait_run(run, 40)["status"]
        events = w.events(run)
        ids = [e["data"].get("id") or e["data"].get("tool_use_id")
               for e in events if e["kind"] == "tool_call"]
        results = [e["data"].get("content") for e in events if e["kind"] == "tool_result"]
        s, _, peek = w.call("GET", "/v1/channels/out/peek?max=10")
        payloads = [m["payload"] for m in peek.get("messages", [])]
        good = {"from": "run"} in payloads
        return (good, f"mallory pre-publishes with op_key <run>:call_1_0 -> {pre[0]}; run "
                      f"{status}, tool calls {ids}, its publish -> {results[-1:]}; "
                      f"`out` holds {payloads}")
    finally:
        w.close()


def m2_mcp_origin(bin_, new):
    w = Weft(bin_).start()
    try:
        port = w.url.rsplit(":", 1)[1]
        got = {}
        for origin in ("https://evil.example", "null", None, f"http://127.0.0.1:{port}"):
            got[origin or "(none)"] = mcp_initialize(
                w, w.admin, {"origin": origin} if origin else None)[0]
        want = [403, 403, 200, 200]
        return (list(got.values()) == want, f"initialize with Origin -> {got}")
    finally:
        w.close()


CHECKS = [w1_webhook_replay, c1_credential_in_logs, m1_mcp_session_cap,
          ch1_consumer_impersonation, ch2_waiter_pool, c2_credential_to_model,
          c3_credential_shapes, w2_webhook_secret_namespace, w3_triage_flush,
          ch3_op_key_preclaim, m2_mcp_origin]


if __name__ == "__main__":
    repro.main(CHECKS)
