"""One trace per request, collected by an OTLP receiver this module starts (docs/operations.md,
Tracing).

The receiver implements the OTLP TraceService Export RPC over gRPC with the official
`opentelemetry-proto` package. A split fleet of its own (tests/harness/fleet.py, every service a
process) exports to it through the standard `OTEL_EXPORTER_OTLP_ENDPOINT`. Each request carries
a W3C `traceparent` of the test's, so its trace is found by id, and then:

- a chat completion through a provider with a canary API key is one trace: gateway → router →
  the provider call (whose outbound `traceparent` the fake upstream does not see, so that hop is
  checked on the HTTP tool below);
- a run created over the public gRPC API with `traceparent` metadata joins the caller's trace;
- a signed webhook delivery and the run it starts are one trace: the sender's `traceparent` →
  gateway (the receiver) → executor;
- a run whose agent calls the HTTP tool (a loopback server this module serves, which records the
  `traceparent` it receives), an MCP tool (the stdio fixture server, through the MCP bridge) and
  Memory (the substrate) is one trace: gateway → executor (over the JetStream dispatch) →
  router, tools → mcp-bridge → substrate;
- every span's parent is in its trace (links intact across processes), and no exported byte
  (span names, attributes, events, resources) holds the canary prompt, the canary credentials or
  the bearer token.

The fleet is started once, in the compat step of the split arrangement (WEFT_ARRANGEMENT=split);
under `weft up` the module is skipped (the same fleet would only be started twice).
"""

import hashlib
import hmac
import http.server
import importlib
import json
import os
import secrets
import sys
import threading
import time
from concurrent import futures
from pathlib import Path

import grpc
import httpx
import pytest
from conftest import run_finished
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "harness"))
import fleet as fleet_harness  # noqa: E402

pytestmark = pytest.mark.skipif(
    os.environ.get("WEFT_ARRANGEMENT") != "split",
    reason="starts a split fleet of its own: runs in the split arrangement's step only",
)

# How long exported spans may take to arrive (the batch exporter flushes every 100 ms here).
SPAN_DEADLINE = 60.0

CANARY_PROMPT = "canary-prompt-" + secrets.token_hex(8)
CANARY_KEY = "sk-canary-" + secrets.token_hex(12)
CANARY_CREDENTIAL = "cred-canary-" + secrets.token_hex(12)
# A webhook's signing secret, read from this variable (the default tenant's namespace).
HOOK_SECRET_ENV = "WEFT_WEBHOOK_DEFAULT__TRACE_HMAC"
CANARY_HOOK_SECRET = "whsec-canary-" + secrets.token_hex(12)


class Receiver(trace_service_pb2_grpc.TraceServiceServicer):
    """Keeps every ExportTraceServiceRequest it is sent."""

    def __init__(self):
        self.lock = threading.Condition()
        self.requests = []

    def Export(self, request, context):  # noqa: N802 (the RPC's name)
        with self.lock:
            self.requests.append(request)
            self.lock.notify_all()
        return trace_service_pb2.ExportTraceServiceResponse()

    def count(self):
        """How many requests have come."""
        with self.lock:
            return len(self.requests)

    def wait_export(self, seen, timeout):
        """Waits until more than `seen` requests have come (or `timeout` seconds pass); how
        many have."""
        with self.lock:
            self.lock.wait_for(lambda: len(self.requests) > seen, timeout=timeout)
            return len(self.requests)

    def raw(self):
        """Every request as it came over the wire."""
        with self.lock:
            return [r.SerializeToString() for r in self.requests]

    def spans(self):
        """Every span as a dict: service, name, trace/span/parent ids (hex), attributes."""
        out = []
        with self.lock:
            requests = list(self.requests)
        for req in requests:
            for rs in req.resource_spans:
                attrs = {a.key: a.value.string_value for a in rs.resource.attributes}
                service = attrs.get("service.name", "?")
                for ss in rs.scope_spans:
                    for s in ss.spans:
                        out.append({
                            "service": service,
                            "name": s.name,
                            "trace": s.trace_id.hex(),
                            "id": s.span_id.hex(),
                            "parent": s.parent_span_id.hex(),
                            "attrs": {a.key: _value(a.value) for a in s.attributes},
                        })
        return out


def _value(v):
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


class ToolTarget(http.server.BaseHTTPRequestHandler):
    """The HTTP tool's target: answers 200 and records the `traceparent` of each request."""

    seen = []

    def do_GET(self):  # noqa: N802
        ToolTarget.seen.append(self.headers.get("traceparent"))
        body = b'{"ok": true}'
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def receiver():
    r = Receiver()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(r, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    r.port = port
    yield r
    server.stop(grace=None)


@pytest.fixture(scope="module")
def tool_target():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), ToolTarget)
    thread = threading.Thread(target=server.serve_forever, name="tool-target", daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    thread.join(10)


@pytest.fixture(scope="module")
def traced(receiver, fake_upstream):
    """A split fleet exporting to `receiver`, with provider `canary` (alias `canary`) at the fake
    upstream behind the canary API key, and the HTTP tool allowed to reach loopback."""
    bin_dir = os.environ.get("WEFT_BIN_DIR", "").strip()
    if not bin_dir:
        pytest.fail("WEFT_BIN_DIR is not set; run the suite through deploy/local/test.sh")
    logs = Path(os.environ.get("WEFT_COMPAT_LOGS", "").split(":")[0] or fleet_harness.LOGS).parent
    config = logs / "tracing.toml"
    fleet_harness.write_compat_config(config, fake_upstream, python=sys.executable)
    text = config.read_text()
    text = text.replace("[router.aliases]\n", '[router.aliases]\ncanary = ["canary/m"]\n', 1)
    text = text.replace("[executor]\n", '[executor]\nallowed_hosts = ["127.0.0.1"]\n', 1)
    text += "\n".join([
        "", "# The canary provider: its API key must appear in no span.",
        "[router.providers.canary]", 'kind = "openai"',
        f'base_url = "{fake_upstream}/{fleet_harness.FAKE_KINDS["openai"]}"',
        'models = ["m"]', 'api_key_env = "WEFT_TRACE_CANARY_KEY"', ""])
    config.write_text(text)
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{receiver.port}",
        "OTEL_TRACES_SAMPLER": "parentbased_always_on",
        "OTEL_BSP_SCHEDULE_DELAY": "100",
        "WEFT_TRACE_CANARY_KEY": CANARY_KEY,
        HOOK_SECRET_ENV: CANARY_HOOK_SECRET,
    }
    fleet = fleet_harness.Fleet(bin_dir, arrangement="split", name="tracing", config=config,
                                env=env, logs_dir=logs, label="tracing", grpc=True)
    fleet.start()
    try:
        yield fleet
    finally:
        clean = fleet.stop()
        assert clean, f"the tracing fleet did not stop cleanly: {fleet.failures}"


def _traceparent():
    trace_id, span_id = secrets.token_hex(16), secrets.token_hex(8)
    return trace_id, span_id, f"00-{trace_id}-{span_id}-01"


def _trace(receiver, trace_id, client_span, complete):
    """The spans of `trace_id` once `complete(spans)` holds and every span's parent is in the
    trace (or is the client's span): waited for, up to SPAN_DEADLINE."""
    deadline = time.monotonic() + SPAN_DEADLINE
    seen = 0
    while True:
        seen = receiver.count()
        spans = [s for s in receiver.spans() if s["trace"] == trace_id]
        ids = {s["id"] for s in spans} | {client_span}
        orphans = [s for s in spans if s["parent"] not in ids]
        if spans and not orphans and complete(spans):
            return spans
        if time.monotonic() > deadline:
            shown = "\n".join(f"  {s['service']} {s['name']} {s['id']} <- {s['parent']} "
                              f"{s['attrs'].get('rpc') or s['attrs'].get('tool') or ''}"
                              for s in spans)
            pytest.fail(f"trace {trace_id} incomplete after {SPAN_DEADLINE}s "
                        f"(orphans: {[s['name'] for s in orphans]}):\n{shown}")
        # The next export may complete it.
        receiver.wait_export(seen, max(0.0, deadline - time.monotonic()))


def _by_id(spans):
    return {s["id"]: s for s in spans}


def _parent(spans, span):
    return _by_id(spans).get(span["parent"])


def _ancestors(spans, span):
    """`span`'s ancestors, nearest first."""
    out, by_id = [], _by_id(spans)
    while span["parent"] in by_id:
        span = by_id[span["parent"]]
        out.append(span)
    return out


def _assert_no_secret(receiver, secrets_):
    raw = b"".join(receiver.raw())
    assert raw, "no span was exported"
    for name, value in secrets_.items():
        assert value.encode() not in raw, f"the {name} is in an exported span"


def test_a_chat_completion_is_one_trace_gateway_router_provider(traced, receiver):
    trace_id, client_span, header = _traceparent()
    r = httpx.post(f"{traced.url}/v1/chat/completions",
                   headers={"authorization": f"Bearer {traced.token}", "traceparent": header},
                   json={"model": "canary",
                         "messages": [{"role": "user", "content": CANARY_PROMPT}]},
                   timeout=60)
    assert r.status_code == 200, r.text

    def complete(spans):
        return {"http", "router.chat", "provider_call"} <= {s["name"] for s in spans}

    spans = _trace(receiver, trace_id, client_span, complete)
    edge = next(s for s in spans if s["name"] == "http")
    assert edge["service"] == "weft-gateway" and edge["parent"] == client_span, edge
    assert edge["attrs"].get("route") == "/v1/chat/completions", edge
    chat = next(s for s in spans if s["name"] == "router.chat")
    assert chat["service"] == "weft-router"
    # Across the process boundary: the router's span hangs under a gateway span.
    assert _parent(spans, chat)["service"] == "weft-gateway", chat
    call = next(s for s in spans if s["name"] == "provider_call")
    assert call["service"] == "weft-router" and call["attrs"].get("provider") == "canary", call
    assert chat in _ancestors(spans, call)
    assert str(call["attrs"].get("status")) == "200", call
    _assert_no_secret(receiver, {"canary prompt": CANARY_PROMPT, "provider API key": CANARY_KEY,
                                 "bearer token": traced.token})


def test_a_run_with_http_mcp_and_memory_tools_is_one_trace(traced, receiver, tool_target):
    auth = {"authorization": f"Bearer {traced.token}"}
    agent = f"traced-{secrets.token_hex(4)}"
    with httpx.Client(base_url=f"{traced.url}/v1/", headers=auth, timeout=60) as http:
        r = http.put(f"agents/{agent}", json={
            "model": "mock-1", "tools": ["HTTP", "Memory", "mcp__fixture__echo"],
            "mcp_servers": ["fixture"], "memory_scopes": ["run"],
            "allowed_hosts": ["127.0.0.1"]})
        assert r.status_code == 201, r.text
        script = {"turns": [
            [{"name": "HTTP", "input": {"method": "GET", "url": f"{tool_target}/x",
                                        "headers": {"x-canary": CANARY_CREDENTIAL}}}],
            [{"name": "Memory", "input": {"op": "set", "scope": "run", "key": "note",
                                          "value": CANARY_PROMPT}}],
            [{"name": "mcp__fixture__echo", "input": {"text": CANARY_PROMPT}}],
        ], "reply": "done"}
        trace_id, client_span, header = _traceparent()
        r = http.post("runs", headers={"traceparent": header}, json={
            "agent": agent, "input": "#mock " + json.dumps(script),
            "credentials": {"canary": CANARY_CREDENTIAL}})
        assert r.status_code == 201, r.text
        run_id = r.json()["run_id"]
        run = run_finished(http, run_id)
        assert run["status"] == "succeeded", run
        events = http.get(f"runs/{run_id}/events", params={"limit": 500}).json()["events"]
        results = {e["data"]["name"]: e["data"] for e in events if e["kind"] == "tool_result"}
        assert set(results) == {"HTTP", "Memory", "mcp__fixture__echo"}, results
        assert not any(r["is_error"] for r in results.values()), results

    def tools(spans):
        return {s["attrs"].get("tool") for s in spans
                if s["name"] == "tool" and s["service"] == "weft-executor"}

    def complete(spans):
        names = {(s["service"], s["name"]) for s in spans}
        return ({("weft-gateway", "http"), ("weft-executor", "run"),
                 ("weft-router", "router.chat"), ("weft-substrate", "memory")} <= names
                and any(s["name"] == "mcp_bridge" and s["attrs"].get("rpc") == "call_tool"
                        for s in spans)
                and tools(spans) >= {"HTTP", "Memory", "mcp__fixture__echo"})

    spans = _trace(receiver, trace_id, client_span, complete)
    edge = next(s for s in spans if s["name"] == "http" and s["parent"] == client_span)
    assert edge["attrs"].get("route") == "/v1/runs", edge
    # The JetStream dispatch carried the trace: the lease hangs under the gateway's request.
    run_span = next(s for s in spans if s["name"] == "run")
    assert edge in _ancestors(spans, run_span), run_span
    assert run_span["attrs"].get("run_id") == run_id
    tool = {s["attrs"]["tool"]: s for s in spans if s["name"] == "tool"}
    for name in ("HTTP", "Memory", "mcp__fixture__echo"):
        assert run_span in _ancestors(spans, tool[name]), name
        assert tool[name]["attrs"].get("outcome") == "ok", tool[name]
    # Each model turn reached the router within the run's trace.
    turns = [s for s in spans if s["name"] == "router.chat"]
    assert len(turns) >= 4 and all(run_span in _ancestors(spans, t) for t in turns), turns
    # Memory: executor tool → substrate.
    memory = [s for s in spans if s["service"] == "weft-substrate" and s["name"] == "memory"]
    assert any(_parent(spans, m) is tool["Memory"] for m in memory), memory
    # MCP: executor tool → bridge, and the bridge's own calls to the substrate.
    bridge = next(s for s in spans if s["name"] == "mcp_bridge"
                  and s["attrs"].get("rpc") == "call_tool")
    assert bridge["service"] == "weft-mcp-bridge" and _parent(spans, bridge) is tool[
        "mcp__fixture__echo"], bridge
    bridge_ids = {s["id"] for s in spans if s["name"] == "mcp_bridge"}
    assert any(s["service"] == "weft-substrate" and s["parent"] in bridge_ids for s in spans), \
        "no substrate span under the MCP bridge's"
    # HTTP: the tool's outbound request carried the run's trace.
    assert any(tp and tp.split("-")[1] == trace_id for tp in ToolTarget.seen), ToolTarget.seen
    _assert_no_secret(receiver, {"canary prompt": CANARY_PROMPT, "run credential":
                                 CANARY_CREDENTIAL, "provider API key": CANARY_KEY,
                                 "bearer token": traced.token})


def test_a_webhook_delivery_and_its_run_are_one_trace(traced, receiver):
    auth = {"authorization": f"Bearer {traced.token}"}
    agent, hook = f"hooked-{secrets.token_hex(4)}", f"traced-{secrets.token_hex(4)}"
    with httpx.Client(base_url=f"{traced.url}/v1/", headers=auth, timeout=60) as http:
        assert http.put(f"agents/{agent}", json={"model": "mock-1"}).status_code == 201
        r = http.put(f"webhooks/{hook}", json={"agent": agent, "signature": "hmac-sha256",
                                               "secret_env": HOOK_SECRET_ENV,
                                               "mapping": {"input": "$.x"}})
        assert r.status_code in (200, 201), r.text
        body = json.dumps({"x": "#mock " + json.dumps({"turns": [], "reply": CANARY_PROMPT})})
        sig = hmac.new(CANARY_HOOK_SECRET.encode(), body.encode(), hashlib.sha256).hexdigest()
        trace_id, client_span, header = _traceparent()
        r = httpx.post(f"{traced.url}/v1/_webhooks/default/{hook}", content=body.encode(),
                       headers={"x-signature": sig, "traceparent": header}, timeout=60)
        assert r.status_code == 202, r.text
        run_id = r.json()["run_id"]
        run = run_finished(http, run_id)
        assert run["status"] == "succeeded", run

    def complete(spans):
        return {("weft-gateway", "http"), ("weft-executor", "run")} <= {
            (s["service"], s["name"]) for s in spans}

    spans = _trace(receiver, trace_id, client_span, complete)
    edge = next(s for s in spans if s["name"] == "http" and s["parent"] == client_span)
    assert edge["attrs"].get("route") == "/v1/_webhooks/{tenant}/{name}", edge
    run_span = next(s for s in spans if s["name"] == "run")
    assert run_span["attrs"].get("run_id") == run_id and edge in _ancestors(spans, run_span)
    _assert_no_secret(receiver, {"canary prompt": CANARY_PROMPT, "webhook secret":
                                 CANARY_HOOK_SECRET, "webhook signature": sig})


def test_a_run_created_over_the_public_grpc_api_joins_the_callers_trace(
        traced, receiver, tmp_path_factory):
    from grpc_tools import protoc
    import grpc_tools

    out = tmp_path_factory.mktemp("grpc-gen")
    include = Path(grpc_tools.__file__).parent / "_proto"
    assert protoc.main(["protoc", f"-I{ROOT / 'proto'}", f"-I{include}", f"--python_out={out}",
                        f"--grpc_python_out={out}", "weft/public/v1/runs.proto"]) == 0
    sys.path.insert(0, str(out))
    try:
        pb2 = importlib.import_module("weft.public.v1.runs_pb2")
        pb2_grpc = importlib.import_module("weft.public.v1.runs_pb2_grpc")
    finally:
        sys.path.remove(str(out))
    auth = {"authorization": f"Bearer {traced.token}"}
    agent = f"grpc-traced-{secrets.token_hex(4)}"
    r = httpx.put(f"{traced.url}/v1/agents/{agent}", json={"model": "mock-1"}, headers=auth,
                  timeout=60)
    assert r.status_code == 201, r.text
    trace_id, client_span, header = _traceparent()
    script = "#mock " + json.dumps({"turns": [], "reply": CANARY_PROMPT})
    with grpc.insecure_channel(traced.grpc_addr) as channel:
        run = pb2_grpc.RunsStub(channel).CreateRun(
            pb2.CreateRunRequest(agent=agent, input=script),
            metadata=[("authorization", f"Bearer {traced.token}"), ("traceparent", header)],
            timeout=60)
    run_id = run.run_id

    def complete(spans):
        return any(s["name"] == "run" and s["attrs"].get("run_id") == run_id for s in spans)

    spans = _trace(receiver, trace_id, client_span, complete)
    edge = next(s for s in spans if s["name"] == "http" and s["parent"] == client_span)
    assert edge["attrs"].get("route") == "/v1/runs", edge
    run_span = next(s for s in spans if s["name"] == "run")
    assert edge in _ancestors(spans, run_span), run_span
    _assert_no_secret(receiver, {"canary prompt": CANARY_PROMPT, "bearer token": traced.token})
