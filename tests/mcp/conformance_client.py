"""Minimal client for the conformance suite's CLIENT scenarios (protocol check of
the suite's calling convention, not a full conformance client).

The suite runs:  <--command words...> <server-url>
with env MCP_CONFORMANCE_SCENARIO=<scenario>, and (0.2.x) MCP_CONFORMANCE_PROTOCOL_VERSION
(default 2025-11-25) and, for some auth scenarios, MCP_CONFORMANCE_CONTEXT (JSON).

    conformance client --command "<py-venv>/bin/python tests/mcp/conformance_client.py" --scenario initialize
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

from mcp import Client, types


def _defaults(schema: dict[str, Any]) -> dict[str, Any]:
    props = schema.get("properties") or {}
    return {k: v["default"] for k, v in props.items() if isinstance(v, dict) and "default" in v}


async def on_elicit(ctx: Any, params: Any) -> types.ElicitResult:
    # Accept with every default the schema declares (SEP-1034).
    schema = getattr(params, "requested_schema", None) or {}
    return types.ElicitResult(action="accept", content=_defaults(dict(schema)))


async def main() -> int:
    url = sys.argv[-1]
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "initialize")
    version = os.environ.get("MCP_CONFORMANCE_PROTOCOL_VERSION", "2025-11-25")
    mode = "legacy" if version < "2026-07-28" else version
    async with Client(url, mode=mode, elicitation_callback=on_elicit) as client:
        tools = (await client.list_tools()).tools
        names = [t.name for t in tools]
        print(f"scenario={scenario} version={version} tools={names}")
        if "add_numbers" in names:
            res = await client.call_tool("add_numbers", {"a": 5, "b": 3})
            print(res.content)
        wanted = ("test_client_elicitation_defaults", "test_reconnection", "test_mrtr_echo_state",
                  "test_mrtr_unrelated", "test_mrtr_no_state", "test_mrtr_no_result_type")
        for name in wanted:
            if name in names:
                res = await client.call_tool(name, {})
                print(res.content)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
