"""What both security suites share: the live `weft up` they run against, its OpenAPI document
with `$ref`s resolved, and the prerequisites the document's examples name (an agent, runs, a
token) or the A2A routes need (an agent offered over A2A, an A2A task), created before any
generated request is sent.

The deployment comes from the environment, as deploy/local/test.sh sets it:
  WEFT_URL    the gateway's base URL (http://127.0.0.1:PORT, no /v1)
  WEFT_TOKEN  an `admin` bearer token
"""

from __future__ import annotations

import copy
import json
import os
import uuid
from dataclasses import dataclass, field
from typing import Any

import requests

# Sizes of what the suites ran, by suite: {"schemathesis": {...}, "nul_pass": {...}}.
SIZES: dict[str, dict[str, Any]] = {}

# Statuses of a run that will not change again.
# How long a prerequisite run may take to reach the state the suites need. A mock-model run
# ends in well under a second; the bound only keeps a broken deployment from hanging the suite.
RUN_SETTLE_SECS = 60.0


def base_url() -> str:
    url = os.environ.get("WEFT_URL", "").rstrip("/")
    if not url:
        raise RuntimeError("set WEFT_URL to the gateway's base URL (http://127.0.0.1:PORT)")
    return url


def admin_token() -> str:
    token = os.environ.get("WEFT_TOKEN", "")
    if not token:
        raise RuntimeError("set WEFT_TOKEN to an admin bearer token")
    return token


def session() -> requests.Session:
    s = requests.Session()
    s.headers["Authorization"] = f"Bearer {admin_token()}"
    return s


def fetch_document() -> dict[str, Any]:
    resp = requests.get(base_url() + "/v1/openapi.json", timeout=30)
    resp.raise_for_status()
    return resp.json()


def resolve(doc: dict[str, Any], schema: Any, seen: frozenset[str] = frozenset()) -> Any:
    """`schema` with every `$ref` replaced by what it points to (a recursive reference is left
    as an empty schema the second time round, so the walk ends)."""
    if isinstance(schema, list):
        return [resolve(doc, s, seen) for s in schema]
    if not isinstance(schema, dict):
        return schema
    if "$ref" in schema:
        target = schema["$ref"]
        if target in seen:
            return {}
        node: Any = doc
        for part in target.removeprefix("#/").split("/"):
            node = node[part]
        merged = {**node, **{k: v for k, v in schema.items() if k != "$ref"}}
        return resolve(doc, merged, seen | {target})
    return {k: resolve(doc, v, seen) for k, v in schema.items()}


METHODS = ("get", "put", "post", "delete", "patch")


@dataclass
class Operation:
    method: str
    path: str
    raw: dict[str, Any]
    doc: dict[str, Any]

    @property
    def label(self) -> str:
        return f"{self.method.upper()} {self.path}"

    @property
    def tags(self) -> list[str]:
        return self.raw.get("tags", [])

    @property
    def forwards_text(self) -> bool:
        """The OpenAI- and Anthropic-compatible doors store nothing and forward text, U+0000
        included, to the provider (the document's description says so); every other route stores
        what it is given and refuses U+0000."""
        return bool({"openai", "anthropic"} & set(self.tags))

    def parameters(self, where: str) -> list[dict[str, Any]]:
        return [resolve(self.doc, p) for p in self.raw.get("parameters", []) if p.get("in") == where]

    def body_schema(self) -> dict[str, Any] | None:
        body = self.raw.get("requestBody", {}).get("content", {}).get("application/json")
        return None if body is None else resolve(self.doc, body["schema"])

    def body_required(self) -> bool:
        return bool(self.raw.get("requestBody", {}).get("required"))

    @property
    def answers_jsonrpc(self) -> bool:
        """A JSON-RPC route (`POST /a2a/rpc`): its 200 is a JSON-RPC response, and it answers its
        refusals in that 200 (an `error` object), as the document says and JSON-RPC clients
        expect, not with a 4xx."""
        ok = self.raw.get("responses", {}).get("200", {}).get("content", {}).get("application/json")
        props = resolve(self.doc, ok["schema"]).get("properties", {}) if ok else {}
        return {"jsonrpc", "error"} <= set(props)


def operations(doc: dict[str, Any]) -> list[Operation]:
    out = []
    for path, item in doc["paths"].items():
        for method in METHODS:
            if method in item:
                out.append(Operation(method, path, item[method], doc))
    return out


@dataclass
class Prerequisites:
    """Things the document's examples refer to, made to exist: the agent its examples name, a
    finished run, a disposable token. `parked_run()` makes a fresh interactive run waiting for
    input, for routes that change a run's state."""

    http: requests.Session
    doc: dict[str, Any]
    agent: str = ""
    finished_run: str = ""
    token_id: str = ""
    protected_token_ids: set[str] = field(default_factory=set)
    # The examples' agent offered over A2A under its own name, and a finished A2A task of it.
    a2a_agent: str = ""
    a2a_task: str = ""

    def example(self, schema_name: str) -> Any:
        return copy.deepcopy(self.doc["components"]["schemas"][schema_name]["example"])

    def setup(self) -> Prerequisites:
        url = base_url()
        self.setup_agent()
        self.finished_run = self.create_run(self.example("CreateRun"))
        self.wait_event(self.finished_run, {"run_finished"})
        # A token the suites may revoke; the admin token they use never is.
        r = self.http.post(f"{url}/v1/tokens", json=self.example("CreateToken"), timeout=30)
        assert r.status_code == 201, f"POST /v1/tokens: {r.status_code} {r.text}"
        self.token_id = r.json()["id"]
        me = self.http.get(f"{url}/v1/tokens", timeout=30).json()["data"]
        self.protected_token_ids = {t["id"] for t in me if t["id"] != self.token_id}
        self.setup_a2a()
        return self

    def setup_a2a(self) -> None:
        """The A2A routes' prerequisites, which the document's examples do not name: an agent
        offered over A2A (AgentContent's example with `a2a.expose`, as `<agent>-a2a`: the
        examples' agent itself is put back as its example before each operation) and a finished
        task of it, started over A2A as a client would."""
        self.a2a_agent = f"{self.agent}-a2a"
        content = {**self.example("AgentContent"), "a2a": {"expose": True}}
        r = self.http.put(f"{base_url()}/v1/agents/{self.a2a_agent}", json=content, timeout=30)
        assert r.status_code in (200, 201), f"PUT /v1/agents/{self.a2a_agent}: {r.status_code} {r.text}"
        r = self.http.post(f"{base_url()}/a2a/message:send", json=self.a2a_message(), timeout=RUN_SETTLE_SECS)
        assert r.status_code == 200, f"POST /a2a/message:send: {r.status_code} {r.text}"
        task = r.json()["task"]
        assert task["status"]["state"] == "TASK_STATE_COMPLETED", r.text
        self.a2a_task = task["id"]

    def a2a_message(self) -> dict[str, Any]:
        """A `SendMessageRequest` starting a task of the A2A agent. Its message id is the run's
        idempotency key, so sending it again is the same (finished) task, not a new run."""
        return {"message": {"messageId": "weft-security-suite", "role": "ROLE_USER",
                            "parts": [{"text": "Say hi"}], "metadata": {"skill": self.a2a_agent}}}

    def a2a_rpc(self) -> dict[str, Any]:
        """A JSON-RPC request answered with a result: `GetTask` of the finished A2A task."""
        return {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": self.a2a_task}}

    def base_body(self, op: Operation) -> Any:
        """A valid body for an operation whose schema has no example to build one from (the A2A
        bodies are the protocol's types, without weft examples); None for every other one."""
        schema = op.raw.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema", {})
        name = schema.get("$ref", "").rsplit("/", 1)[-1]
        if name == "SendMessageRequest":
            return self.a2a_message()
        if name == "JsonRpcRequest":
            return self.a2a_rpc()
        return None

    def parked_a2a_task(self) -> str:
        """A fresh A2A task waiting for input: a parked interactive run with an A2A context (a
        task is a run whose metadata has one), for routes that change a task's state."""
        r = self.http.post(f"{base_url()}/v1/runs", json={
            "agent": self.agent, "interactive": True, "metadata": {"a2a_context_id": str(uuid.uuid4())},
        }, timeout=30)
        assert r.status_code == 201, f"POST /v1/runs: {r.status_code} {r.text}"
        assert r.json()["status"] == "awaiting_input", r.text
        return r.json()["run_id"]

    def setup_agent(self) -> None:
        """The agent the examples name (CreateRun's example runs it), as AgentContent's example
        describes it, active and not retired; a skill and a volume of the same name."""
        self.agent = self.example("CreateRun")["agent"]
        r = self.http.put(f"{base_url()}/v1/agents/{self.agent}", json=self.example("AgentContent"), timeout=30)
        assert r.status_code in (200, 201), f"PUT /v1/agents/{self.agent}: {r.status_code} {r.text}"
        # A skill of the same name, so the /v1/skills/{name} routes reach a real definition.
        r = self.http.put(f"{base_url()}/v1/skills/{self.agent}", json=self.example("SkillContent"), timeout=30)
        assert r.status_code in (200, 201), f"PUT /v1/skills/{self.agent}: {r.status_code} {r.text}"
        # A writable volume of the same name, so the /v1/volumes/{name} routes reach a real one.
        r = self.http.post(f"{base_url()}/v1/volumes", json={"name": self.agent, "mode": "rw"}, timeout=30)
        assert r.status_code in (200, 201), f"POST /v1/volumes: {r.status_code} {r.text}"

    def create_run(self, body: dict[str, Any]) -> str:
        r = self.http.post(f"{base_url()}/v1/runs", json=body, timeout=30)
        assert r.status_code == 201, f"POST /v1/runs {body}: {r.status_code} {r.text}"
        return r.json()["run_id"]

    def wait_event(self, run_id: str, kinds: set[str]) -> str:
        """Reads the run's SSE stream until an event of one of `kinds`; returns its kind. The
        stream replays the transcript first, so an event already written is seen at once."""
        with self.http.get(f"{base_url()}/v1/runs/{run_id}/stream", stream=True,
                           timeout=RUN_SETTLE_SECS) as r:
            assert r.status_code == 200, f"stream {run_id}: {r.status_code} {r.text}"
            for line in r.iter_lines(decode_unicode=True):
                if line and line.startswith("event:"):
                    kind = line.split(":", 1)[1].strip()
                    if kind in kinds:
                        return kind
        raise AssertionError(f"run {run_id}'s stream ended before any of {sorted(kinds)}")

    def parked_run(self) -> str:
        # An interactive run without input is parked by the create call itself.
        r = self.http.post(f"{base_url()}/v1/runs",
                           json={"agent": self.agent, "interactive": True}, timeout=30)
        assert r.status_code == 201, f"POST /v1/runs: {r.status_code} {r.text}"
        assert r.json()["status"] == "awaiting_input", r.text
        return r.json()["run_id"]


    def parked_plan_run(self) -> str:
        # A plan run given its plan and asked to wait for approval parks once it proposed it.
        r = self.http.post(f"{base_url()}/v1/runs", json={
            "agent": self.agent, "mode": "plan", "input": "the goal",
            "plan": {"approval": "before_execute", "tasks": [{"id": "a", "description": "do a"}]},
        }, timeout=30)
        assert r.status_code == 201, f"POST /v1/runs: {r.status_code} {r.text}"
        run = r.json()["run_id"]
        # Read the run's stream until it parks: the event commits with the park itself.
        with self.http.get(f"{base_url()}/v1/runs/{run}/stream", stream=True, timeout=30) as s:
            assert s.status_code == 200, f"stream: {s.status_code}"
            for line in s.iter_lines(decode_unicode=True):
                if line == "event: plan_awaiting_approval":
                    return run
        raise AssertionError(f"plan run {run} did not park for approval")


def undo_drain(method: str, path: str, path_parameters: dict[str, Any] | None) -> None:
    """Resumes what a drain request just drained (it may have been refused: resuming is
    idempotent), so a later operation is not refused for a drain left in force."""
    if method.lower() != "post":
        return
    if path == "/v1/fleet/drain":
        url = f"{base_url()}/v1/fleet/resume"
    elif path == "/v1/tenants/{tenant}/drain" and path_parameters and "tenant" in path_parameters:
        tenant = requests.utils.quote(str(path_parameters["tenant"]), safe="")
        url = f"{base_url()}/v1/tenants/{tenant}/resume"
    else:
        return
    requests.post(url, headers={"Authorization": f"Bearer {admin_token()}"}, timeout=30)


def tenant_archive(tenant: str) -> bytes:
    """The archive `GET /v1/tenants/{tenant}/export` answers (an operator's call)."""
    r = requests.get(f"{base_url()}/v1/tenants/{requests.utils.quote(tenant, safe='')}/export",
                     headers={"Authorization": f"Bearer {admin_token()}"}, timeout=60)
    assert r.status_code == 200, f"export {tenant}: {r.status_code} {r.text[:300]}"
    return r.content


def path_values(op: Operation, pre: Prerequisites, run: str | None = None) -> dict[str, str]:
    """Real values for an operation's path parameters: the examples' agent, `run` (or the
    finished run) for run routes, `run` (or the finished A2A task) for A2A task routes, the
    disposable token, the document's example otherwise."""
    out = {}
    for p in op.parameters("path"):
        name = p["name"]
        if name == "name":
            out[name] = pre.agent
        elif name == "id" and op.path.startswith("/v1/runs/"):
            out[name] = run or pre.finished_run
        elif name == "id" and op.path.startswith("/v1/tokens/"):
            out[name] = pre.token_id
        elif name == "id" and op.path.startswith("/a2a/tasks/"):
            out[name] = run or pre.a2a_task
        elif "example" in p:
            out[name] = str(p["example"])
        else:
            out[name] = str(uuid.uuid4())
    return out


def error_of(resp: requests.Response) -> tuple[str | None, str]:
    """(`param`, `message`) of an error body in any of weft's three shapes."""
    try:
        body = resp.json()
    except ValueError:
        return None, resp.text
    err = body.get("error") if isinstance(body, dict) else None
    if not isinstance(err, dict):
        return None, json.dumps(body)
    return err.get("param"), str(err.get("message", ""))
