"""MCP on both sides, black-box, with the real `mcp` Python package (2.x).

Server face: weft's tools over `<gateway>/mcp` with a bearer token; `agent__<name>` streaming
progress and returning the run's answer; tenant isolation; scopes (no `runs:create`, no run); a
2025-11-25 session continued on another gateway replica (the split arrangement runs two gateways
on one database and sets WEFT_GATEWAY2_URL).

Client side: an agent run (mock model scripted to call tools) using the tools of the fixture MCP
server (tests/mcp/fixture_server.py) over stdio (declared by the operator in the config, as
`fixture`) and over streamable HTTP (defined by the test over the API, with a per-run credential
in a header), and the credential in no stored event, no database row and no log line.

deploy/local/test.sh sets WEFT_COMPAT_DATABASE (the arrangement's database) and WEFT_COMPAT_LOGS
(its log files) so the test can grep them.
"""

import asyncio
import contextlib
import json
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "mcp" / "fixture_server.py"
RUN_DEADLINE = 60.0


@contextlib.asynccontextmanager
async def _mcp(root_url, token):
    """An initialized ClientSession on weft's /mcp, as a user of the `mcp` package opens one."""
    headers = {"Authorization": f"Bearer {token}"}
    async with create_mcp_http_client(headers=headers) as h:
        async with streamable_http_client(f"{root_url}/mcp", http_client=h) as (read, write, *_):
            async with ClientSession(read, write) as session:
                await session.initialize()
                yield session


def _run(coro):
    return asyncio.run(coro)


def _mint(http, tenant, subject, scopes):
    r = http.post(
        "tokens",
        json={"name": f"mcp-{subject}", "tenant": tenant, "subject": subject, "scopes": scopes},
    )
    assert r.status_code == 201, r.text
    body = r.json()
    return body.get("token") or body["secret"]


def _agent(http, name, **content):
    r = http.put(f"agents/{name}", json={"model": "mock-1", **content})
    assert r.status_code in (200, 201), r.text


def _wait_run(http, run_id, token=None):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    deadline = time.monotonic() + RUN_DEADLINE
    while True:
        run = http.get(f"runs/{run_id}", headers=headers).json()
        if run["status"] in ("succeeded", "failed", "cancelled"):
            return run
        assert time.monotonic() < deadline, f"run {run_id} did not finish: {run}"
        time.sleep(0.1)


def _events(http, run_id):
    return http.get(f"runs/{run_id}/events", params={"limit": 500}).json()["events"]


# --- the server face -----------------------------------------------------------------------------


def test_weft_tools_are_listed_and_called_over_mcp_with_a_token(root_url, token, http):
    name = f"mcp-face-{secrets.token_hex(4)}"
    _agent(http, name, description="says what it is told")

    async def go():
        async with _mcp(root_url, token) as s:
            names = {t.name for t in (await s.list_tools()).tools}
            for expected in ("spawn_run", "get_run", "list_runs", "cancel_run", "send_input",
                             "memory_get", "memory_set", "memory_search", "channel_publish",
                             "channel_read", "list_agents", "get_agent", "put_agent",
                             "list_volumes", "volume_tree", "volume_read", "volume_write",
                             "volume_delete", "volume_changes", "volume_undo",
                             "volume_snapshot", "volume_snapshots", "volume_restore",
                             f"agent__{name}"):
                assert expected in names, (expected, sorted(names))
            agents = await s.call_tool("list_agents", {})
            assert not agents.is_error
            assert name in agents.content[0].text
            started = await s.call_tool(
                "spawn_run", {"agent": name, "input": '#mock {"reply": "spawned"}'}
            )
            assert not started.is_error, started.content
            run_id = json.loads(started.content[0].text)["run_id"]
            return run_id

    run_id = _run(go())
    assert _wait_run(http, run_id)["status"] == "succeeded"

    async def read_back():
        async with _mcp(root_url, token) as s:
            got = await s.call_tool("get_run", {"run_id": run_id})
            assert not got.is_error
            assert json.loads(got.content[0].text)["status"] == "succeeded"
            bad = await s.call_tool("get_run", {"run_id": "not-a-run"})
            assert bad.is_error

    _run(read_back())


def test_agent_tool_streams_progress_and_returns_the_answer(root_url, token, http):
    name = f"mcp-stream-{secrets.token_hex(4)}"
    _agent(http, name)
    progress = []

    async def on_progress(value, total, message):
        progress.append((value, message))

    async def go():
        async with _mcp(root_url, token) as s:
            return await s.call_tool(
                f"agent__{name}",
                {"input": '#mock {"reply": "the answer is 42"}'},
                progress_callback=on_progress,
            )

    result = _run(go())
    assert not result.is_error, result.content
    assert result.content[0].text == "the answer is 42"
    messages = [m for _, m in progress]
    assert "run_started" in messages and "run_finished" in messages, messages
    values = [v for v, _ in progress]
    assert values == sorted(values) and len(set(values)) == len(values), values
    run_id = result.structured_content["run_id"]
    assert _wait_run(http, run_id)["status"] == "succeeded"


def test_another_tenant_sees_none_of_the_first_tenants_agents_or_runs(root_url, token, http):
    name = f"mcp-tenant-{secrets.token_hex(4)}"
    _agent(http, name)
    r = http.post("runs", json={"agent": name, "input": '#mock {"reply": "mine"}'})
    assert r.status_code == 201, r.text
    run_id = r.json()["run_id"]
    other = _mint(http, f"other-{secrets.token_hex(3)}", "eve", ["runs:create", "runs:read"])

    async def go():
        async with _mcp(root_url, other) as s:
            names = {t.name for t in (await s.list_tools()).tools}
            assert f"agent__{name}" not in names
            assert not any(n.startswith("agent__") for n in names), names
            agents = await s.call_tool("list_agents", {})
            assert name not in agents.content[0].text
            run = await s.call_tool("get_run", {"run_id": run_id})
            assert run.is_error and "404" in run.content[0].text, run.content
            runs = await s.call_tool("list_runs", {})
            assert run_id not in runs.content[0].text
            direct = await s.call_tool(f"agent__{name}", {"input": "hi"})
            assert direct.is_error

    _run(go())


def test_a_token_without_runs_create_cannot_start_a_run_through_mcp(root_url, token, http):
    name = f"mcp-scope-{secrets.token_hex(4)}"
    _agent(http, name)
    reader = _mint(http, "default", "reader", ["runs:read"])
    before = http.get("runs", params={"agent": name}).json()

    async def go():
        async with _mcp(root_url, reader) as s:
            names = {t.name for t in (await s.list_tools()).tools}
            assert "spawn_run" not in names and f"agent__{name}" not in names, names
            assert "get_run" in names and "list_agents" in names
            spawned = await s.call_tool("spawn_run", {"agent": name, "input": "hi"})
            assert spawned.is_error and "runs:create" in spawned.content[0].text
            direct = await s.call_tool(f"agent__{name}", {"input": "hi"})
            assert direct.is_error and "runs:create" in direct.content[0].text

    _run(go())
    after = http.get("runs", params={"agent": name}).json()
    assert after == before


def test_mcp_without_a_token_is_401(root_url):
    r = httpx.post(
        f"{root_url}/mcp",
        json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}},
        headers={"Accept": "application/json, text/event-stream"},
    )
    assert r.status_code == 401
    assert r.headers["www-authenticate"].startswith("Bearer")


def _rpc(url, token, method, params, rid, session=None):
    headers = {
        "Authorization": f"Bearer {token}",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2025-11-25",
    }
    if session:
        headers["Mcp-Session-Id"] = session
    body = {"jsonrpc": "2.0", "method": method, "params": params}
    if rid is not None:
        body["id"] = rid
    return httpx.post(f"{url}/mcp", json=body, headers=headers, timeout=30)


def _result(resp):
    """The JSON-RPC message of a JSON or SSE answer."""
    if resp.headers.get("content-type", "").startswith("text/event-stream"):
        for line in resp.text.splitlines():
            if line.startswith("data:") and line[5:].strip():
                msg = json.loads(line[5:])
                if "id" in msg:
                    return msg
        raise AssertionError(f"no response in the stream: {resp.text!r}")
    return resp.json()


def test_a_session_opened_on_one_gateway_continues_on_another(root_url, token):
    other = os.environ.get("WEFT_GATEWAY2_URL", "").strip()
    if not other:
        if os.environ.get("WEFT_ARRANGEMENT") == "split":
            pytest.fail("the split arrangement must set WEFT_GATEWAY2_URL")
        pytest.skip("one gateway in this arrangement (the split arrangement runs two)")
    init = _rpc(root_url, token, "initialize", {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "compat", "version": "1"},
    }, 1)
    assert init.status_code == 200, init.text
    session = init.headers["mcp-session-id"]
    assert _result(init)["result"]["serverInfo"]["name"] == "weft"
    ack = _rpc(other, token, "notifications/initialized", {}, None, session)
    assert ack.status_code in (200, 202), ack.text
    listed = _rpc(other, token, "tools/list", {}, 2, session)
    assert listed.status_code == 200, listed.text
    tools = {t["name"] for t in _result(listed)["result"]["tools"]}
    assert "spawn_run" in tools
    # And back on the first: still the same session.
    again = _rpc(root_url, token, "tools/list", {}, 3, session)
    assert again.status_code == 200, again.text
    # A made-up session id is refused, not silently restored.
    ghost = _rpc(other, token, "tools/list", {}, 4, "ghost-" + secrets.token_hex(8))
    assert ghost.status_code == 404, ghost.text


def _weft_bin():
    bin_dir = os.environ.get("WEFT_BIN_DIR", "").strip() or str(ROOT / "target" / "debug")
    path = Path(bin_dir) / "weft"
    assert path.exists(), f"{path} is not built; run cargo build --bins"
    return str(path)


@contextlib.asynccontextmanager
async def _stdio(upstream, token):
    params = StdioServerParameters(
        command=_weft_bin(), args=["mcp", "--upstream", upstream],
        env={"WEFT_TOKEN": token, "PATH": os.environ.get("PATH", "")},
    )
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            yield session


def test_weft_mcp_over_stdio_forwards_to_the_fleet(root_url, token, http):
    name = f"mcp-stdio-{secrets.token_hex(4)}"
    _agent(http, name)

    async def go():
        async with _stdio(root_url, token) as s:
            names = {t.name for t in (await s.list_tools()).tools}
            assert "spawn_run" in names and f"agent__{name}" in names, names
            result = await s.call_tool(f"agent__{name}", {"input": '#mock {"reply": "via stdio"}'})
            assert not result.is_error, result.content
            assert result.content[0].text == "via stdio"

    _run(go())


def test_weft_mcp_says_clearly_when_the_fleet_is_unreachable(token):
    async def go():
        async with _stdio("http://127.0.0.1:9", token) as s:
            result = await s.call_tool("list_agents", {})
            assert result.is_error
            text = result.content[0].text
            assert "unreachable" in text and "127.0.0.1:9" in text, text

    _run(go())


def test_a_session_is_honoured_only_for_the_principal_that_opened_it(root_url, token, http):
    init = _rpc(root_url, token, "initialize", {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "compat", "version": "1"},
    }, 1)
    assert init.status_code == 200, init.text
    session = init.headers["mcp-session-id"]
    other = _mint(http, f"other-{secrets.token_hex(3)}", "mallory", ["runs:create", "runs:read"])
    stolen = _rpc(root_url, other, "tools/list", {}, 2, session)
    assert stolen.status_code == 404, stolen.text
    gone = httpx.delete(f"{root_url}/mcp", headers={
        "Authorization": f"Bearer {other}", "Mcp-Session-Id": session})
    assert gone.status_code == 404, gone.text
    # The owner's session is untouched.
    _rpc(root_url, token, "notifications/initialized", {}, None, session)
    mine = _rpc(root_url, token, "tools/list", {}, 3, session)
    assert mine.status_code == 200, mine.text


# --- the client side: an agent using external MCP servers ----------------------------------------


def _start_fixture(tmp_path, secret, port=0):
    """tests/mcp/fixture_server.py over streamable HTTP on `port` (0: any), requiring
    `X-Api-Key: <secret>`. Returns (process, port, log file)."""
    port_file = tmp_path / f"port-{secrets.token_hex(4)}"
    log = tmp_path / "fixture.log"
    proc = subprocess.Popen(
        [sys.executable, str(FIXTURE), "http", "--port", str(port), "--port-file", str(port_file),
         "--require-header", f"X-Api-Key={secret}"],
        env={**os.environ, "FIXTURE_LOG": str(log)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 30
    while not (port_file.exists() and port_file.read_text().strip()):
        assert proc.poll() is None, proc.stderr.read().decode()
        assert time.monotonic() < deadline, "the fixture MCP server did not start"
        time.sleep(0.05)
    return proc, int(port_file.read_text().strip()), log


@pytest.fixture()
def http_fixture(tmp_path):
    secret = "sk-" + secrets.token_hex(16)
    proc, port, log = _start_fixture(tmp_path, secret)
    try:
        yield f"http://127.0.0.1:{port}/mcp", secret, log
    finally:
        proc.terminate()
        proc.wait(10)


def test_a_session_the_server_lost_is_reopened(root_url, http, tmp_path):
    """The MCP server restarts between two runs (its sessions are gone: 404 on the old id); the
    bridge's pooled session recovers and the second run's call goes through."""
    secret = "sk-" + secrets.token_hex(16)
    proc, port, _ = _start_fixture(tmp_path, secret)
    server = f"fixlost{secrets.token_hex(3)}"
    name = f"mcp-lost-{secrets.token_hex(4)}"
    try:
        r = http.put(f"mcp-servers/{server}", json={
            "url": f"http://127.0.0.1:{port}/mcp",
            "headers": {"X-Api-Key": "${run.credentials.k}"}})
        assert r.status_code == 201, r.text
        _agent(http, name, mcp_servers=[server], tools=[f"mcp__{server}__echo"])

        def echo(text):
            script = {"turns": [[{"name": f"mcp__{server}__echo", "input": {"text": text}}]],
                      "reply": "done"}
            r = http.post("runs", json={"agent": name, "input": "#mock " + json.dumps(script),
                                        "credentials": {"k": secret}})
            run_id = r.json()["run_id"]
            assert _wait_run(http, run_id)["status"] == "succeeded"
            return [e["data"] for e in _events(http, run_id) if e["kind"] == "tool_result"][0]

        assert echo("before")["content"] == "before"
        proc.terminate()
        proc.wait(10)
        proc, _, _ = _start_fixture(tmp_path, secret, port)
        after = echo("after")
        assert not after["is_error"] and after["content"] == "after", after
    finally:
        proc.terminate()
        proc.wait(10)


def test_an_agent_uses_mcp_tools_over_stdio_and_http_and_the_credential_stays_secret(
    root_url, http, http_fixture
):
    url, secret, log = http_fixture
    server = f"fixhttp{secrets.token_hex(3)}"
    r = http.put(
        f"mcp-servers/{server}",
        json={"url": url, "headers": {"X-Api-Key": "${run.credentials.fixkey}"},
              "description": "the fixture over HTTP"},
    )
    assert r.status_code == 201, r.text
    # A tenant may not declare a stdio server.
    r = http.put(f"mcp-servers/{server}-stdio", json={"transport": "stdio", "command": "sh"})
    assert r.status_code == 403 and "operator" in r.json()["error"]["message"], r.text

    name = f"mcp-user-{secrets.token_hex(4)}"
    _agent(http, name, mcp_servers=["fixture", server],
           tools=["mcp__fixture__*", f"mcp__{server}__whoami", f"mcp__{server}__append",
                  f"mcp__{server}__fail"])
    script = {
        "turns": [[
            {"name": "mcp__fixture__echo", "input": {"text": "over stdio"}},
            {"name": f"mcp__{server}__whoami", "input": {}},
            {"name": f"mcp__{server}__append", "input": {"line": "from weft"}},
            {"name": f"mcp__{server}__fail", "input": {}},
            {"name": f"mcp__{server}__echo", "input": {"text": "not allowed"}},
        ]],
        "reply": "done",
    }
    r = http.post("runs", json={"agent": name, "input": "#mock " + json.dumps(script),
                                "credentials": {"fixkey": secret}})
    assert r.status_code == 201, r.text
    run_id = r.json()["run_id"]
    run = _wait_run(http, run_id)
    assert run["status"] == "succeeded", run
    events = _events(http, run_id)
    results = {e["data"]["name"]: e["data"] for e in events if e["kind"] == "tool_result"}
    started = next(e for e in events if e["kind"] == "run_started")
    assert results["mcp__fixture__echo"]["content"] == "over stdio"
    assert not results["mcp__fixture__echo"]["is_error"]
    who = results[f"mcp__{server}__whoami"]
    assert not who["is_error"], who
    assert "[redacted: credential fixkey]" in who["content"], who
    assert results[f"mcp__{server}__append"]["content"] == "appended"
    assert log.read_text().splitlines() == ["from weft"]
    assert results[f"mcp__{server}__fail"]["is_error"]
    assert results[f"mcp__{server}__echo"]["is_error"]
    assert "not available" in results[f"mcp__{server}__echo"]["content"]
    assert started["data"]["tools"]

    # The secret is in no stored event, no row of the database and no log line.
    transcript = json.dumps(events)
    assert secret not in transcript
    database = os.environ.get("WEFT_COMPAT_DATABASE", "").strip()
    if database:
        dump = subprocess.run(
            ["pg_dump", "--data-only", "-h", "127.0.0.1", "-U", "postgres", database],
            capture_output=True, text=True, check=True,
        ).stdout
        assert len(dump) > 1000
        assert secret not in dump, "the credential was written to the database"
    elif os.environ.get("WEFT_REQUIRE_FAKE_UPSTREAM") == "1":
        pytest.fail("deploy/local/test.sh must set WEFT_COMPAT_DATABASE")
    for path in filter(None, os.environ.get("WEFT_COMPAT_LOGS", "").split(":")):
        text = Path(path).read_text(errors="replace")
        assert secret not in text, f"the credential appears in {path}"

    # Without the credential the HTTP server is unusable, and the run says why.
    r = http.post("runs", json={"agent": name, "input": "#mock " + json.dumps(
        {"turns": [[{"name": f"mcp__{server}__whoami", "input": {}}]], "reply": "done"})})
    run_id = r.json()["run_id"]
    assert _wait_run(http, run_id)["status"] == "succeeded"
    results = [e["data"] for e in _events(http, run_id) if e["kind"] == "tool_result"]
    assert results[0]["is_error"] and "fixkey" in results[0]["content"], results


def test_mcp_inspector_cli_lists_weft_tools(root_url, token, tmp_path):
    """MCP Inspector's CLI (Node 24, pinned in tests/mcp/package-lock.json) lists weft's tools."""
    node = os.environ.get("WEFT_NODE24", "").strip()
    inspector = os.environ.get("WEFT_INSPECTOR", "").strip()
    if not node or not inspector:
        if os.environ.get("WEFT_REQUIRE_INSPECTOR") == "1":
            pytest.fail("deploy/local/test.sh installed the MCP tools but set no WEFT_INSPECTOR")
        pytest.skip("MCP Inspector is not installed (deploy/local/test.sh installs it)")
    out = subprocess.run(
        [node, inspector, "--cli", f"{root_url}/mcp", "--transport", "http",
         "--method", "tools/list", "--header", f"Authorization: Bearer {token}"],
        capture_output=True, text=True, timeout=120,
        # The Inspector keeps state under $HOME: never the developer's.
        env={**os.environ, "HOME": str(tmp_path), "PATH": f"{Path(node).parent}:{os.environ['PATH']}"},
    )
    assert out.returncode == 0, out.stderr[-2000:]
    names = {t["name"] for t in json.loads(out.stdout)["tools"]}
    assert {"spawn_run", "get_run", "memory_get", "list_agents"} <= names, names


def test_cancelling_an_agent_tool_call_cancels_the_run(root_url, token, http):
    """An MCP cancellation of `agent__<name>` (the client gives up on the call) cancels the run."""
    channel = f"mcp-wait-{secrets.token_hex(4)}"
    r = http.put(f"channels/{channel}", json={"scope": "tenant"})
    assert r.status_code in (200, 201), r.text
    name = f"mcp-cancel-{secrets.token_hex(4)}"
    _agent(http, name, tools=["Channel"], channels={"publish": [], "subscribe": [channel]})
    # The run waits on a channel nobody writes to, so it runs until cancelled.
    script = {"turns": [[{"name": "Channel",
                          "input": {"op": "read", "channel": channel, "wait_ms": 30000}}]],
              "reply": "done"}

    async def go():
        async with _mcp(root_url, token) as s:
            call = asyncio.create_task(
                s.call_tool(f"agent__{name}", {"input": "#mock " + json.dumps(script)})
            )
            deadline = time.monotonic() + 30
            run_id = None
            while run_id is None:
                assert time.monotonic() < deadline, "the run did not start"
                await asyncio.sleep(0.1)
                runs = http.get("runs", params={"agent": name}).json()["runs"]
                running = [x for x in runs if x["status"] == "running"]
                if running:
                    run_id = running[0]["run_id"]
            call.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await call
            return run_id

    run_id = _run(go())
    run = _wait_run(http, run_id)
    assert run["status"] == "cancelled", run
