"""A2A (Agent2Agent v1.0) with the official Python SDK (`a2a-sdk`), black-box against the fleet:
the SDK fetches the tenant's agent card, sends a message, streams a task to completion, answers an
input-required task, gets and cancels tasks, over the JSON-RPC and the REST binding; another
tenant's task is not found; JSON-RPC errors are the protocol's. docs/a2a.md.
"""

import asyncio
import contextlib
import json
import uuid

import httpx
import pytest
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types import (CancelTaskRequest, GetTaskRequest, Message, Part, Role,
                       SendMessageRequest, TaskState)
from a2a.utils.errors import TaskNotFoundError

from conftest import TIMEOUT


def _script(turns, reply):
    return "#mock " + json.dumps({"turns": turns, "reply": reply})


def _put_agent(root_url, token, name, **content):
    r = httpx.put(f"{root_url}/v1/agents/{name}", json={"model": "mock-1", **content},
                  headers={"authorization": f"Bearer {token}"}, timeout=TIMEOUT)
    assert r.status_code in (200, 201), r.text


@pytest.fixture(scope="module")
def tenant_token(root_url, token):
    """A token of a tenant of this module's own, so its card lists only the agents made here."""
    r = httpx.post(f"{root_url}/v1/tokens", headers={"authorization": f"Bearer {token}"},
                   timeout=TIMEOUT, json={"name": "a2a", "tenant": f"a2a-{uuid.uuid4().hex[:6]}",
                                          "subject": "a2a-client", "scopes": ["tenant:admin"]})
    assert r.status_code == 201, r.text
    body = r.json()
    return body.get("token") or body["secret"]


@pytest.fixture(scope="module")
def agents(root_url, tenant_token):
    """Two exposed agents (a plain one and one that asks) and one that is not exposed."""
    _put_agent(root_url, tenant_token, "helper", description="Answers questions", tools=["Context"],
               a2a={"expose": True, "tags": ["qa"], "examples": ["what is weft?"]})
    _put_agent(root_url, tenant_token, "asker", tools=["Interruption"],
               a2a={"expose": True})
    _put_agent(root_url, tenant_token, "hidden", description="not for A2A")
    return ["helper", "asker"]


def _http(tenant_token):
    return httpx.AsyncClient(headers={"Authorization": f"Bearer {tenant_token}"},
                             timeout=TIMEOUT)


def _user(text, skill=None, task_id=None, context_id=None):
    m = Message(message_id=str(uuid.uuid4()), role=Role.ROLE_USER, parts=[Part(text=text)])
    if skill:
        m.metadata.update({"skill": skill})
    if task_id:
        m.task_id = task_id
    if context_id:
        m.context_id = context_id
    return m


async def _client(root_url, tenant_token, streaming, bindings=("JSONRPC",)):
    http = _http(tenant_token)
    card = await A2ACardResolver(http, f"{root_url}/a2a").get_agent_card()
    client = ClientFactory(ClientConfig(httpx_client=http, streaming=streaming,
                                        supported_protocol_bindings=list(bindings))).create(card)
    return _Closing(http), card, client


class _Closing:
    """Closes the SDK's httpx client at the end of an `async with` (the SDK opens it itself)."""

    def __init__(self, http):
        self.http = http

    async def __aenter__(self):
        return self.http

    async def __aexit__(self, *exc):
        with contextlib.suppress(Exception):
            await self.http.aclose()


async def _send(client, message):
    """Every event of one send (a unary send yields one)."""
    out = []
    async for ev in client.send_message(SendMessageRequest(message=message)):
        out.append(ev)
    return out


def test_the_card_lists_the_exposed_agents_as_skills(root_url, tenant_token, agents):
    async def go():
        async with _http(tenant_token) as http:
            card = await A2ACardResolver(http, f"{root_url}/a2a").get_agent_card()
            root = await A2ACardResolver(http, root_url).get_agent_card()
            return card, root

    card, root = asyncio.run(go())
    assert sorted(s.id for s in card.skills) == ["asker", "helper"]
    helper = next(s for s in card.skills if s.id == "helper")
    assert helper.description == "Answers questions" and list(helper.tags) == ["qa"]
    assert list(helper.examples) == ["what is weft?"]
    assert [i.protocol_binding for i in card.supported_interfaces] == ["JSONRPC", "HTTP+JSON"]
    assert all(i.protocol_version == "1.0" for i in card.supported_interfaces)
    assert card.supported_interfaces[0].url == f"{root_url}/a2a/rpc"
    assert card.capabilities.streaming
    assert "bearer" in card.security_schemes
    assert root == card, "the root well-known path serves the same card"
    # The card is the caller's tenant's: without a token there is none.
    r = httpx.get(f"{root_url}/.well-known/agent-card.json", timeout=TIMEOUT)
    assert r.status_code == 401


def test_send_a_message_and_get_the_task(root_url, tenant_token, agents):
    async def go():
        http, _, client = await _client(root_url, tenant_token, streaming=False)
        async with http:
            events = await _send(client, _user(_script([], "weft is a runtime"), "helper"))
            task = events[-1].task
            got = await client.get_task(GetTaskRequest(id=task.id, history_length=10))
            return task, got

    task, got = asyncio.run(go())
    assert task.status.state == TaskState.TASK_STATE_COMPLETED, task
    assert task.artifacts[0].parts[0].text == "weft is a runtime"
    assert task.context_id
    assert got.id == task.id and got.status.state == TaskState.TASK_STATE_COMPLETED
    assert [m.role for m in got.history][:1] == [Role.ROLE_USER]
    assert got.history[-1].parts[0].text == "weft is a runtime"


def test_stream_a_task_to_completion(root_url, tenant_token, agents):
    async def go():
        http, _, client = await _client(root_url, tenant_token, streaming=True)
        async with http:
            return await _send(client, _user(
                _script([[{"name": "Context", "input": {"op": "self"}}]], "streamed"),
                "helper"))

    events = asyncio.run(go())
    kinds = [ev.WhichOneof("payload") for ev in events]
    assert kinds[0] == "task", kinds
    assert kinds[-1] == "status_update", kinds
    assert events[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
    assert "artifact_update" in kinds
    art = next(ev.artifact_update for ev in events if ev.WhichOneof("payload") == "artifact_update")
    assert art.artifact.parts[0].text == "streamed"
    states = [ev.status_update.status.state for ev in events if ev.WhichOneof("payload") == "status_update"]
    assert states[0] == TaskState.TASK_STATE_WORKING


def test_an_input_required_task_is_answered(root_url, tenant_token, agents):
    ask = _script([[{"name": "Interruption", "input": {"op": "ask", "question": "your name?"}}]],
                  "thanks")

    async def go():
        http, _, client = await _client(root_url, tenant_token, streaming=True)
        async with http:
            first = await _send(client, _user(ask, "asker"))
            task = first[0].task
            last = first[-1].status_update
            resumed = await _send(client, _user("Ada", task_id=task.id,
                                                context_id=task.context_id))
            got = await client.get_task(GetTaskRequest(id=task.id))
            return task, last, resumed, got

    task, last, resumed, got = asyncio.run(go())
    assert last.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert last.status.message.parts[0].text == "your name?"
    assert last.status.message.role == Role.ROLE_AGENT
    assert resumed[0].task.id == task.id
    assert resumed[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
    assert got.status.state == TaskState.TASK_STATE_COMPLETED


def test_a_task_is_cancelled(root_url, tenant_token, agents):
    ask = _script([[{"name": "Interruption", "input": {"op": "ask", "question": "wait?"}}]], "x")

    async def go():
        http, _, client = await _client(root_url, tenant_token, streaming=False)
        async with http:
            task = (await _send(client, _user(ask, "asker")))[-1].task
            cancelled = await client.cancel_task(CancelTaskRequest(id=task.id))
            try:
                await client.cancel_task(CancelTaskRequest(id=task.id))
                again = None
            except Exception as e:  # noqa: BLE001 - the SDK's typed error is checked below
                again = e
            return task, cancelled, again

    task, cancelled, again = asyncio.run(go())
    assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert cancelled.id == task.id
    assert cancelled.status.state == TaskState.TASK_STATE_CANCELED
    assert type(again).__name__ == "TaskNotCancelableError", repr(again)


def test_the_rest_binding(root_url, tenant_token, agents):
    async def go():
        http, _, client = await _client(root_url, tenant_token, streaming=True,
                                        bindings=("HTTP+JSON",))
        async with http:
            events = await _send(client, _user(_script([], "over rest"), "helper"))
            got = await client.get_task(GetTaskRequest(id=events[0].task.id))
            try:
                await client.get_task(GetTaskRequest(id=str(uuid.uuid4())))
                missing = None
            except Exception as e:  # noqa: BLE001
                missing = e
            return events, got, missing

    events, got, missing = asyncio.run(go())
    assert events[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
    assert got.artifacts[0].parts[0].text == "over rest"
    assert isinstance(missing, TaskNotFoundError), repr(missing)


def test_another_tenants_task_is_not_found(root_url, token, tenant_token, agents):
    async def go():
        http, _, client = await _client(root_url, tenant_token, streaming=False)
        async with http:
            task = (await _send(client, _user(_script([], "mine"), "helper")))[-1].task
        # The fleet's first tenant: its own card, and no sight of this task.
        other, _, oclient = await _client(root_url, token, streaming=False)
        async with other:
            try:
                await oclient.get_task(GetTaskRequest(id=task.id))
                return None
            except TaskNotFoundError as e:
                return e

    assert isinstance(asyncio.run(go()), TaskNotFoundError)


def test_a_skill_must_be_named_and_exposed(root_url, tenant_token, agents):
    h = {"authorization": f"Bearer {tenant_token}", "A2A-Version": "1.0"}

    def rpc(method, params, id=1):
        r = httpx.post(f"{root_url}/a2a/rpc", headers=h, timeout=TIMEOUT,
                       json={"jsonrpc": "2.0", "id": id, "method": method, "params": params})
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["id"] == id and body["jsonrpc"] == "2.0"
        return body

    msg = {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}
    e = rpc("SendMessage", {"message": msg})["error"]
    assert e["code"] == -32602 and "helper" in e["message"] and "asker" in e["message"]
    e = rpc("SendMessage", {"message": {**msg, "metadata": {"skill": "hidden"}}})["error"]
    assert e["code"] == -32602 and "hidden" in e["message"]
    e = rpc("SendMessage", {"message": {**msg, "taskId": str(uuid.uuid4())}}, id="s")["error"]
    assert e["code"] == -32001
    assert rpc("message/send", {})["error"]["code"] == -32601
    assert rpc("ListTasks", {})["error"]["code"] == -32004
    r = httpx.post(f"{root_url}/a2a/rpc", headers=h, content=b"{not json", timeout=TIMEOUT)
    assert r.json()["error"]["code"] == -32700 and r.json()["id"] is None
    r = httpx.post(f"{root_url}/a2a/rpc", headers={**h, "A2A-Version": "0.3"}, timeout=TIMEOUT,
                   json={"jsonrpc": "2.0", "id": 2, "method": "GetTask", "params": {"id": "x"}})
    assert r.json()["error"]["code"] == -32009
    r = httpx.post(f"{root_url}/a2a/rpc", timeout=TIMEOUT,
                   json={"jsonrpc": "2.0", "id": 3, "method": "GetTask", "params": {"id": "x"}})
    assert r.status_code == 401


# ---- weft as an A2A client: a peer built with a2a-sdk, mounted as tools ----

PEER_SECRET = "peer-secret-0f3a"


def _peer_app(base):
    """An A2A 1.0 peer (a2a-sdk's server): skill `echo` echoes, `ask` asks for input, `whoami`
    says which bearer token it got; every request needs `Bearer PEER_SECRET`."""
    from a2a.helpers import new_task_from_user_message, new_text_part
    from a2a.server.agent_execution import AgentExecutor
    from a2a.server.request_handlers import DefaultRequestHandler
    from a2a.server.routes import (create_agent_card_routes, create_jsonrpc_routes,
                                   create_rest_routes)
    from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
    from a2a.types import (AgentCapabilities, AgentCard, AgentInterface, AgentSkill,
                           HTTPAuthSecurityScheme, SecurityRequirement, SecurityScheme,
                           StringList)
    from starlette.applications import Starlette
    from starlette.middleware.base import BaseHTTPMiddleware
    from starlette.responses import JSONResponse

    seen_auth = []

    class Peer(AgentExecutor):
        async def execute(self, ctx, q):
            text = ctx.get_user_input()
            md = ctx.message.metadata
            skill = md["skill"] if "skill" in md else ""
            task = ctx.current_task or new_task_from_user_message(ctx.message)
            if ctx.current_task is None:
                await q.enqueue_event(task)
            up = TaskUpdater(q, task.id, task.context_id)
            await up.start_work(up.new_agent_message([new_text_part(f"working on {skill}")]))
            if skill == "ask" and ctx.current_task is None:
                await up.requires_input(up.new_agent_message([new_text_part("which colour?")]))
                return
            if skill == "whoami":
                reply = f"you sent {seen_auth[-1]}"
            else:
                reply = f"echo: {text}"
            await up.add_artifact([new_text_part(reply)], name="result")
            await up.complete()

        async def cancel(self, ctx, q):
            await TaskUpdater(q, ctx.task_id, ctx.context_id).cancel()

    card = AgentCard(
        name="echo peer", description="a test peer", version="1.0.0",
        supported_interfaces=[
            AgentInterface(url=f"{base}/rpc", protocol_binding="JSONRPC", protocol_version="1.0"),
            AgentInterface(url=f"{base}/rest", protocol_binding="HTTP+JSON", protocol_version="1.0")],
        capabilities=AgentCapabilities(streaming=True), default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[AgentSkill(id=s, name=s, description=f"the {s} skill", tags=["test"])
                for s in ("echo", "ask", "whoami")],
        security_schemes={"bearer": SecurityScheme(
            http_auth_security_scheme=HTTPAuthSecurityScheme(scheme="Bearer"))},
        security_requirements=[SecurityRequirement(schemes={"bearer": StringList(list=[])})])
    handler = DefaultRequestHandler(agent_executor=Peer(), task_store=InMemoryTaskStore(),
                                    agent_card=card)

    class Bearer(BaseHTTPMiddleware):
        async def dispatch(self, request, call_next):
            auth = request.headers.get("authorization", "")
            seen_auth.append(auth)
            if auth != f"Bearer {PEER_SECRET}":
                return JSONResponse({"error": "unauthorized"}, status_code=401)
            return await call_next(request)

    app = Starlette(routes=create_agent_card_routes(card)
                    + create_jsonrpc_routes(handler, rpc_url="/rpc")
                    + create_rest_routes(handler, path_prefix="/rest"))
    app.add_middleware(Bearer)
    return app


@pytest.fixture(scope="module")
def peer():
    """The peer on a loopback port, in a thread of its own."""
    import socket
    import threading

    import uvicorn

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    base = f"http://127.0.0.1:{port}"
    server = uvicorn.Server(uvicorn.Config(_peer_app(base), host="127.0.0.1", port=port,
                                           log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    for _ in range(200):
        if server.started:
            break
        thread.join(0.05)
    assert server.started, "the A2A peer did not start"
    yield base
    server.should_exit = True
    thread.join(10)


def _run_events(root_url, tenant_token, body):
    h = {"authorization": f"Bearer {tenant_token}"}
    r = httpx.post(f"{root_url}/v1/runs", json=body, headers=h, timeout=TIMEOUT)
    assert r.status_code == 201, r.text
    run_id = r.json()["run_id"]
    events = []
    with httpx.stream("GET", f"{root_url}/v1/runs/{run_id}/stream", headers=h,
                      timeout=TIMEOUT) as s:
        for line in s.iter_lines():
            if line.startswith("data:"):
                ev = json.loads(line[5:])
                events.append(ev)
                if ev["kind"] == "run_finished":
                    break
    return events


def _calls(*calls):
    return [[{"name": name, "input": args}] for name, args in calls]


def test_a_weft_agent_calls_a_peer_as_a_tool(root_url, tenant_token, peer):
    h = {"authorization": f"Bearer {tenant_token}"}
    r = httpx.put(f"{root_url}/v1/a2a-peers/echo", headers=h, timeout=TIMEOUT, json={
        "description": "the test's peer", "card_url": f"{peer}/.well-known/agent-card.json",
        "headers": {"Authorization": "Bearer ${run.credentials.peer}"},
        "skills": ["echo", "ask", "whoami"]})
    assert r.status_code == 201, r.text
    r = httpx.put(f"{root_url}/v1/a2a-peers/blocked", headers=h, timeout=TIMEOUT, json={
        "card_url": "http://10.255.255.1/.well-known/agent-card.json"})
    assert r.status_code == 201, r.text
    _put_agent(root_url, tenant_token, "caller", tools=["a2a__echo__*", "a2a__blocked__*"])
    script = _script(_calls(("a2a__echo__echo", {"message": "hello peer"}),
                            ("a2a__echo__ask", {"message": "paint it"}),
                            ("a2a__echo__whoami", {"message": "who?"}),
                            ("a2a__blocked__x", {"message": "hi"})), "done")
    events = _run_events(root_url, tenant_token, {
        "agent": "caller", "input": script, "credentials": {"peer": PEER_SECRET}})
    assert events[-1]["data"]["status"] == "succeeded", events[-1]
    results = {e["data"]["name"]: e["data"] for e in events if e["kind"] == "tool_result"}
    assert results["a2a__echo__echo"]["content"] == "echo: hello peer"
    assert not results["a2a__echo__echo"]["is_error"]
    asked = results["a2a__echo__ask"]["content"]
    assert "which colour?" in asked and "task_id" in asked, asked
    # The credential reached the peer, and its value never reaches the transcript.
    assert results["a2a__echo__whoami"]["content"] == "you sent Bearer [redacted: credential peer]"
    assert PEER_SECRET not in json.dumps(events)
    blocked = results["a2a__blocked__x"]
    assert blocked["is_error"] and "refused" in blocked["content"], blocked
    updates = [e["data"] for e in events if e["kind"] == "peer_update"]
    assert {u["state"] for u in updates} >= {"TASK_STATE_WORKING", "artifact",
                                             "TASK_STATE_COMPLETED",
                                             "TASK_STATE_INPUT_REQUIRED"}, updates
    assert all(u["peer"] == "echo" and u["task_id"] for u in updates)
    working = next(u for u in updates if u["state"] == "TASK_STATE_WORKING")
    assert working["text"] == "working on echo"
