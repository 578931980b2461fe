"""MCP fixture server for weft's own MCP-bridge tests (Python `mcp` SDK 2.x).

    python fixture_server.py stdio
    python fixture_server.py http [--port N] [--port-file PATH] [--require-header NAME=VALUE ...]

http serves streamable HTTP at http://127.0.0.1:N/mcp (N=0 picks a free port; the
chosen port is written to --port-file, if given, and logged on stderr as
"fixture_server: listening on http://127.0.0.1:N/mcp"). With --require-header every
HTTP request lacking that exact header value gets 401 before MCP sees it.

Tools (annotations in brackets):
  echo(text) -> text                        [readOnlyHint]
  add(a, b) -> a+b (also structuredContent {"result": a+b})   [readOnlyHint]
  append(line) -> "appended"                [destructiveHint, not idempotent]
      appends `line` to the file $FIXTURE_LOG (when set)
  read_count() -> number of lines in $FIXTURE_LOG (also structuredContent)  [readOnlyHint]
  block_read(label) / block_write(label) -> "released"
      [block_read: readOnlyHint; block_write: destructiveHint]
      append "start <label>" to $FIXTURE_LOG, then wait until $FIXTURE_LOG.release
      exists (polled every 50 ms, error after 120 s)
  whoami() -> http: JSON {"authorization": <header or null>, "x-api-key": <header or null>}
              stdio: the value of $FIXTURE_SECRET ("" when unset)          [readOnlyHint]
  fail() -> always a tool error (isError: true)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import sys
import time

from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

READ_ONLY = ToolAnnotations(read_only_hint=True)
EFFECTFUL = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=False)
RELEASE_POLL_S = 0.05
RELEASE_TIMEOUT_S = 120.0

TRANSPORT = "stdio"  # set in main(); whoami answers per transport

mcp = MCPServer("weft-fixture", version="1.0.0", log_level="WARNING")


def _log_path() -> str | None:
    return os.environ.get("FIXTURE_LOG") or None


def _append_line(line: str) -> None:
    path = _log_path()
    if path is None:
        return
    with open(path, "a", encoding="utf-8") as f:
        f.write(line.replace("\n", " ") + "\n")
        f.flush()
        os.fsync(f.fileno())


@mcp.tool(annotations=READ_ONLY, structured_output=False)
def echo(text: str) -> str:
    """Return the text unchanged."""
    return text


@mcp.tool(annotations=READ_ONLY)
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@mcp.tool(annotations=EFFECTFUL, structured_output=False)
def append(line: str) -> str:
    """Append a line to the fixture log file (an effect: not read-only, not idempotent)."""
    _append_line(line)
    return "appended"


@mcp.tool(annotations=READ_ONLY)
def read_count() -> int:
    """Number of lines in the fixture log file (0 when it does not exist)."""
    path = _log_path()
    if path is None or not os.path.exists(path):
        return 0
    with open(path, encoding="utf-8") as f:
        return sum(1 for _ in f)


async def _block(label: str) -> str:
    _append_line(f"start {label}")
    path = _log_path()
    if path is None:
        raise ToolError("FIXTURE_LOG is not set: nothing to wait for")
    release = path + ".release"
    deadline = time.monotonic() + RELEASE_TIMEOUT_S
    while not os.path.exists(release):
        if time.monotonic() >= deadline:
            raise ToolError(f"{release} did not appear within {RELEASE_TIMEOUT_S:.0f} s")
        await asyncio.sleep(RELEASE_POLL_S)
    return "released"


@mcp.tool(annotations=READ_ONLY, structured_output=False)
async def block_read(label: str) -> str:
    """Read-only call that blocks until $FIXTURE_LOG.release exists."""
    return await _block(label)


@mcp.tool(annotations=EFFECTFUL, structured_output=False)
async def block_write(label: str) -> str:
    """Effectful call that blocks until $FIXTURE_LOG.release exists."""
    return await _block(label)


@mcp.tool(annotations=READ_ONLY, structured_output=False)
def whoami(ctx: Context) -> str:
    """HTTP: the Authorization and X-Api-Key request headers; stdio: $FIXTURE_SECRET."""
    if TRANSPORT == "stdio":
        return os.environ.get("FIXTURE_SECRET", "")
    headers = {k.lower(): v for k, v in (ctx.headers or {}).items()}
    return json.dumps({"authorization": headers.get("authorization"), "x-api-key": headers.get("x-api-key")})


@mcp.tool(structured_output=False)
def fail() -> str:
    """Always fails (the result has isError: true)."""
    raise ToolError("fixture failure: this tool always fails")


class RequireHeaders:
    """ASGI wrapper: 401 for any HTTP request lacking one of the required header values."""

    def __init__(self, app, required: list[tuple[str, str]]):
        self.app = app
        self.required = [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in required]

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and self.required:
            got = {}
            for k, v in scope.get("headers", []):
                got.setdefault(k.lower(), v)
            if any(got.get(name) != value for name, value in self.required):
                body = json.dumps({"error": "unauthorized"}).encode()
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [
                            (b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode()),
                            (b"www-authenticate", b"Bearer"),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


def _header_arg(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError("expected NAME=VALUE")
    return name.strip(), value


def serve_http(port: int, port_file: str | None, required: list[tuple[str, str]]) -> None:
    import uvicorn

    app = RequireHeaders(mcp.streamable_http_app(host="127.0.0.1"), required)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(128)
    actual = sock.getsockname()[1]
    if port_file:
        tmp = port_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(f"{actual}\n")
        os.replace(tmp, port_file)
    print(f"fixture_server: listening on http://127.0.0.1:{actual}/mcp", file=sys.stderr, flush=True)
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    asyncio.run(uvicorn.Server(config).serve(sockets=[sock]))


def main() -> None:
    global TRANSPORT
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="transport", required=True)
    sub.add_parser("stdio", help="serve on stdin/stdout")
    http = sub.add_parser("http", help="serve streamable HTTP at http://127.0.0.1:PORT/mcp")
    http.add_argument("--port", type=int, default=0, help="0 = pick a free port (default)")
    http.add_argument("--port-file", help="write the bound port to this file once listening")
    http.add_argument(
        "--require-header", type=_header_arg, action="append", default=[], metavar="NAME=VALUE",
        help="answer 401 to requests without this header value (repeatable)",
    )
    opts = ap.parse_args()
    TRANSPORT = opts.transport
    if opts.transport == "stdio":
        mcp.run("stdio")
    else:
        serve_http(opts.port, opts.port_file, opts.require_header)


if __name__ == "__main__":
    main()
