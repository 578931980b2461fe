"""Self-check of fixture_server.py with the Python `mcp` client, over stdio and
streamable HTTP (with and without the required header). Exit 0 when all pass.

    target/mcp-tools/py-venv/bin/python tests/mcp/check_fixture.py
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx2

from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

HERE = Path(__file__).resolve().parent
SERVER = str(HERE / "fixture_server.py")
SECRET = "Bearer fixture-s3cret"
results: list[tuple[str, bool, str]] = []
# "legacy" = 2025-11-25 initialize handshake; "2026-07-28" = stateless per-request _meta wire
MODES = ("legacy", "2026-07-28")


def check(name: str, ok: bool, detail: object = "") -> None:
    results.append((name, ok, str(detail)))
    print(f"{'ok  ' if ok else 'FAIL'} {name} {detail if not ok else ''}".rstrip())


def text_of(res) -> str:
    return "".join(getattr(c, "text", "") for c in res.content)


async def exercise(client: Client, label: str, log: Path) -> None:
    tools = {t.name: t for t in (await client.list_tools()).tools}
    expected = {"echo", "add", "append", "read_count", "block_read", "block_write", "whoami", "fail"}
    check(f"{label}: tools/list has all tools", expected <= tools.keys(), sorted(tools))
    ro = {n: bool(t.annotations and t.annotations.read_only_hint) for n, t in tools.items()}
    check(
        f"{label}: readOnlyHint on echo/add/read_count/block_read/whoami only",
        ro == {"echo": True, "add": True, "append": False, "read_count": True, "block_read": True,
               "block_write": False, "whoami": True, "fail": False},
        ro,
    )
    res = await client.call_tool("echo", {"text": "héllo"})
    check(f"{label}: echo", text_of(res) == "héllo" and not res.is_error, res)
    res = await client.call_tool("add", {"a": 5, "b": 3})
    check(f"{label}: add", text_of(res) == "8" and res.structured_content == {"result": 8}, res)
    log.unlink(missing_ok=True)
    for line in ("one", "two"):
        res = await client.call_tool("append", {"line": line})
        check(f"{label}: append {line}", text_of(res) == "appended", res)
    check(f"{label}: log file content", log.read_text() == "one\ntwo\n", log.read_text())
    res = await client.call_tool("read_count", {})
    check(f"{label}: read_count", res.structured_content == {"result": 2}, res)
    res = await client.call_tool("fail", {})
    check(f"{label}: fail -> isError", res.is_error is True, res)

    release = Path(str(log) + ".release")
    for tool in ("block_read", "block_write"):
        release.unlink(missing_ok=True)
        task = asyncio.create_task(client.call_tool(tool, {"label": f"{label}-{tool}"}))
        await asyncio.sleep(0.4)
        started = f"start {label}-{tool}" in log.read_text()
        check(f"{label}: {tool} logged start and is still blocked", started and not task.done(), log.read_text())
        release.touch()
        res = await asyncio.wait_for(task, 5)
        check(f"{label}: {tool} released", text_of(res) == "released", res)
    release.unlink(missing_ok=True)


async def run_stdio(log: Path) -> None:
    env = dict(os.environ, FIXTURE_LOG=str(log), FIXTURE_SECRET="stdio-secret-value")
    params = StdioServerParameters(command=sys.executable, args=[SERVER, "stdio"], env=env)
    for mode in MODES:
        async with Client(params, mode=mode) as client:
            await exercise(client, f"stdio/{mode}", log)
            res = await client.call_tool("whoami", {})
            check(f"stdio/{mode}: whoami returns FIXTURE_SECRET", text_of(res) == "stdio-secret-value", res)


def start_http(log: Path, port_file: Path) -> subprocess.Popen:
    env = dict(os.environ, FIXTURE_LOG=str(log))
    port_file.unlink(missing_ok=True)
    proc = subprocess.Popen(
        [sys.executable, SERVER, "http", "--port", "0", "--port-file", str(port_file),
         "--require-header", f"Authorization={SECRET}"],
        env=env,
    )
    deadline = time.monotonic() + 20
    while not port_file.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("fixture_server http did not start")
        time.sleep(0.05)
    return proc


async def run_http(log: Path, port_file: Path) -> None:
    proc = start_http(log, port_file)
    try:
        url = f"http://127.0.0.1:{port_file.read_text().strip()}/mcp"
        async with httpx2.AsyncClient() as raw:
            r = await raw.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
            check("http: request without the header -> 401", r.status_code == 401, r.status_code)
            r = await raw.post(url, json={}, headers={"Authorization": "Bearer wrong"})
            check("http: wrong header value -> 401", r.status_code == 401, r.status_code)
        headers = {"Authorization": SECRET, "X-Api-Key": "key-123"}
        for mode in MODES:
            async with create_mcp_http_client(headers=headers) as http:
                async with Client(streamable_http_client(url, http_client=http), mode=mode) as client:
                    await exercise(client, f"http/{mode}", log)
                    res = await client.call_tool("whoami", {})
                    got = json.loads(text_of(res))
                    want = {"authorization": SECRET, "x-api-key": "key-123"}
                    check(f"http/{mode}: whoami returns both headers", got == want, got)
        try:
            async with Client(url) as client:
                await client.list_tools()
            check("http: Client without the header is refused", False, "connected")
        except Exception as exc:  # the SDK surfaces the 401 as an error
            check("http: Client without the header is refused", True, type(exc).__name__)
    finally:
        proc.terminate()
        proc.wait(10)


async def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "fixture.log"
        await run_stdio(log)
        await run_http(log, Path(tmp) / "port")
    failed = [r for r in results if not r[1]]
    print(f"{len(results) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
