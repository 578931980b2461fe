"""Reference server for the MCP conformance suite's SERVER scenarios.

Exposes every fixture (tool / resource / prompt / completion) that the
scenarios of @modelcontextprotocol/conformance 0.1.16 (protocol 2025-11-25) and
0.2.0-alpha.12 (--requirements 2025-11-25 / 2026-07-28) call, with the exact
names and values they check. It exists to prove the suite's command lines and
to be a model for weft's own fixture server; results are raw dicts so that what
goes on the wire is what is written here.

    python conformance_server.py [--port 3001]     # streamable HTTP at /mcp

Built on the Python `mcp` SDK 2.x lowlevel Server (one endpoint serves both the
2025-11-25 session wire and the stateless 2026-07-28 wire).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import hmac
import itertools
import json
import os
import struct
import zlib
from typing import Any

import uvicorn

from mcp import types
from mcp.server.caching import CacheHint
from mcp.server.lowlevel import Server
from mcp.server.streamable_http import EventStore
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, PromptsListChanged, ToolsListChanged
from mcp.shared.exceptions import MCPError


def _png_1x1_red() -> str:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    raw = b"\x00\xff\x00\x00"  # filter byte + one RGB pixel
    png = (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )
    return base64.b64encode(png).decode()


def _wav_silence() -> str:
    samples = b"\x00\x00" * 8  # 8 samples of 16-bit mono silence
    header = b"RIFF" + struct.pack("<I", 36 + len(samples)) + b"WAVE"
    fmt = b"fmt " + struct.pack("<IHHIIHH", 16, 1, 1, 8000, 16000, 2, 16)
    return base64.b64encode(header + fmt + b"data" + struct.pack("<I", len(samples)) + samples).decode()


PNG = _png_1x1_red()
WAV = _wav_silence()
STATE_KEY = os.urandom(32)

EMPTY = {"type": "object", "properties": {}}


def text(t: str) -> dict[str, Any]:
    return {"type": "text", "text": t}


def tool(name: str, description: str, schema: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"name": name, "description": description, "inputSchema": schema or EMPTY}


JSON_SCHEMA_2020_12 = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {
        "address": {
            "$anchor": "addressDef",
            "type": "object",
            "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
        }
    },
    "properties": {
        "name": {"type": "string"},
        "address": {"$ref": "#/$defs/address"},
        "contactMethod": {"type": "string", "enum": ["phone", "email"]},
        "phone": {"type": "string"},
        "email": {"type": "string"},
    },
    "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
    "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
    "then": {"required": ["phone"]},
    "else": {"required": ["email"]},
    "additionalProperties": False,
}

STRING_ARG = {"type": "string"}

TOOLS = [
    tool("test_simple_text", "Returns a simple text response"),
    tool("test_image_content", "Returns a 1x1 PNG image"),
    tool("test_audio_content", "Returns a short WAV clip"),
    tool("test_embedded_resource", "Returns an embedded text resource"),
    tool("test_multiple_content_types", "Returns text, image and resource content"),
    tool("test_tool_with_logging", "Sends three info log notifications"),
    tool("test_error_handling", "Always fails with isError"),
    tool("test_tool_with_progress", "Reports progress 0, 50, 100 of 100"),
    tool(
        "test_sampling",
        "Asks the client to sample an LLM",
        {"type": "object", "properties": {"prompt": STRING_ARG}, "required": ["prompt"]},
    ),
    tool(
        "test_elicitation",
        "Asks the client for user input",
        {"type": "object", "properties": {"message": STRING_ARG}, "required": ["message"]},
    ),
    tool("test_elicitation_sep1034_defaults", "Elicitation with default values (SEP-1034)"),
    tool("test_elicitation_sep1330_enums", "Elicitation with the five enum schema forms (SEP-1330)"),
    tool("json_schema_2020_12_tool", "Tool with JSON Schema 2020-12 features", JSON_SCHEMA_2020_12),
    tool("test_reconnection", "Closes the SSE stream mid-call, answers after the client reconnects (SEP-1699)"),
    # 2026-07-28 (stateless wire) diagnostics and MRTR (SEP-2322) fixtures
    tool("test_missing_capability", "Needs the client's sampling capability"),
    tool("test_streaming_elicitation", "Needs user input (answered with input_required on 2026-07-28)"),
    tool("test_logging_tool", "Logs at info level (only when the request opted in)"),
    tool("test_trigger_tool_change", "Emits a tools list_changed event"),
    tool("test_trigger_prompt_change", "Emits a prompts list_changed event"),
    tool("test_input_required_result_elicitation", "MRTR: one elicitation round"),
    tool("test_input_required_result_sampling", "MRTR: one sampling round"),
    tool("test_input_required_result_list_roots", "MRTR: one roots/list round"),
    tool("test_input_required_result_request_state", "MRTR: round-trips requestState"),
    tool("test_input_required_result_multiple_inputs", "MRTR: three input requests at once"),
    tool("test_input_required_result_multi_round", "MRTR: two rounds with evolving requestState"),
    tool("test_input_required_result_tampered_state", "MRTR: rejects a tampered requestState"),
    tool("test_input_required_result_capabilities", "MRTR: asks only for declared client capabilities"),
]

ELICIT_USER = {
    "type": "object",
    "properties": {
        "username": {"type": "string", "description": "User's response"},
        "email": {"type": "string", "description": "User's email address"},
    },
    "required": ["username", "email"],
}

SEP1034_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "description": "User name", "default": "John Doe"},
        "age": {"type": "integer", "description": "User age", "default": 30},
        "score": {"type": "number", "description": "User score", "default": 95.5},
        "status": {
            "type": "string",
            "description": "User status",
            "enum": ["active", "inactive", "pending"],
            "default": "active",
        },
        "verified": {"type": "boolean", "description": "Verification status", "default": True},
    },
}

SEP1330_SCHEMA = {
    "type": "object",
    "properties": {
        "untitledSingle": {"type": "string", "enum": ["option1", "option2", "option3"]},
        "titledSingle": {
            "type": "string",
            "oneOf": [
                {"const": "value1", "title": "First Option"},
                {"const": "value2", "title": "Second Option"},
                {"const": "value3", "title": "Third Option"},
            ],
        },
        "legacyEnum": {
            "type": "string",
            "enum": ["opt1", "opt2", "opt3"],
            "enumNames": ["Option One", "Option Two", "Option Three"],
        },
        "untitledMulti": {"type": "array", "items": {"type": "string", "enum": ["option1", "option2", "option3"]}},
        "titledMulti": {
            "type": "array",
            "items": {
                "anyOf": [
                    {"const": "value1", "title": "First Choice"},
                    {"const": "value2", "title": "Second Choice"},
                    {"const": "value3", "title": "Third Choice"},
                ]
            },
        },
    },
}


def elicit_req(message: str, props: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "method": "elicitation/create",
        "params": {
            "message": message,
            "requestedSchema": {"type": "object", "properties": props, "required": required},
        },
    }


def sample_req(prompt: str, max_tokens: int) -> dict[str, Any]:
    return {
        "method": "sampling/createMessage",
        "params": {"messages": [{"role": "user", "content": text(prompt)}], "maxTokens": max_tokens},
    }


ROOTS_REQ = {"method": "roots/list", "params": {}}


def seal(payload: str) -> str:
    mac = hmac.new(STATE_KEY, payload.encode(), hashlib.sha256).hexdigest()[:32]
    return f"{payload}.{mac}"


def unseal(state: Any) -> str:
    if not isinstance(state, str) or "." not in state:
        raise MCPError(code=-32602, message="requestState missing or malformed")
    payload, mac = state.rsplit(".", 1)
    if not hmac.compare_digest(mac, hmac.new(STATE_KEY, payload.encode(), hashlib.sha256).hexdigest()[:32]):
        raise MCPError(code=-32602, message="requestState failed integrity check")
    return payload


def input_required(requests: dict[str, Any], state: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"resultType": "input_required", "inputRequests": requests}
    if state is not None:
        out["requestState"] = seal(state)
    return out


def check_responses(responses: Any) -> dict[str, Any] | None:
    """None = no inputResponses (first round); raises on a malformed value."""
    if responses is None:
        return None
    if not isinstance(responses, dict) or not all(isinstance(v, dict) for v in responses.values()):
        raise MCPError(code=-32602, message="inputResponses must map keys to result objects")
    return responses


class MemoryEventStore(EventStore):
    """Enough resumability for SEP-1699 (test_reconnection / server-sse-polling)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, Any]] = []
        self.ids = itertools.count(1)

    async def store_event(self, stream_id, message):  # type: ignore[override]
        event_id = f"ev-{next(self.ids)}"
        self.events.append((event_id, stream_id, message))
        return event_id

    async def replay_events_after(self, last_event_id, send_callback):  # type: ignore[override]
        index = next((i for i, e in enumerate(self.events) if e[0] == last_event_id), None)
        if index is None:
            return None
        stream_id = self.events[index][1]
        from mcp.server.streamable_http import EventMessage

        for event_id, sid, message in self.events[index + 1 :]:
            if sid == stream_id and message is not None:
                await send_callback(EventMessage(message, event_id))
        return stream_id


bus = InMemorySubscriptionBus()


async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> Any:
    name = params.name
    args = params.arguments or {}
    raw = dict(ctx.params or {})
    session = ctx.session
    rid = ctx.request_id

    if name == "test_simple_text":
        return {"content": [text("This is a simple text response for testing.")]}
    if name == "test_image_content":
        return {"content": [{"type": "image", "data": PNG, "mimeType": "image/png"}]}
    if name == "test_audio_content":
        return {"content": [{"type": "audio", "data": WAV, "mimeType": "audio/wav"}]}
    if name == "test_embedded_resource":
        res = {"uri": "test://embedded-resource", "mimeType": "text/plain", "text": "This is an embedded resource content."}
        return {"content": [{"type": "resource", "resource": res}]}
    if name == "test_multiple_content_types":
        res = {
            "uri": "test://mixed-content-resource",
            "mimeType": "application/json",
            "text": json.dumps({"test": "data", "value": 123}, separators=(",", ":")),
        }
        return {
            "content": [
                text("Multiple content types test:"),
                {"type": "image", "data": PNG, "mimeType": "image/png"},
                {"type": "resource", "resource": res},
            ]
        }
    if name in ("test_tool_with_logging", "test_logging_tool"):
        for i, msg in enumerate(("Tool execution started", "Tool processing data", "Tool execution completed")):
            if i:
                await asyncio.sleep(0.05)
            await session.send_log_message(level="info", data=msg, related_request_id=rid)
        return {"content": [text("Tool with logging executed successfully")]}
    if name == "test_error_handling":
        return {"isError": True, "content": [text("This tool intentionally returns an error for testing")]}
    if name == "test_tool_with_progress":
        for i, p in enumerate((0, 50, 100)):
            if i:
                await asyncio.sleep(0.05)
            await session.report_progress(p, 100)  # no-op without _meta.progressToken
        return {"content": [text("Tool with progress executed successfully")]}
    if name == "test_sampling":
        res = await session.create_message(
            [types.SamplingMessage(role="user", content=types.TextContent(type="text", text=str(args.get("prompt", ""))))],
            max_tokens=100,
            related_request_id=rid,
        )
        reply = res.content.text if isinstance(res.content, types.TextContent) else str(res.content)
        return {"content": [text(f"LLM response: {reply}")]}
    if name == "test_elicitation":
        res = await session.elicit_form(str(args.get("message", "")), ELICIT_USER, related_request_id=rid)
        return {"content": [text(f"User response: action={res.action}, content={json.dumps(res.content)}")]}
    if name in ("test_elicitation_sep1034_defaults", "test_elicitation_sep1330_enums"):
        schema = SEP1034_SCHEMA if name.endswith("defaults") else SEP1330_SCHEMA
        res = await session.elicit_form("Please review and update the form fields", schema, related_request_id=rid)
        return {"content": [text(f"Elicitation completed: action={res.action}, content={json.dumps(res.content)}")]}
    if name == "json_schema_2020_12_tool":
        return {"content": [text(f"Received: {json.dumps(args)}")]}
    if name == "test_reconnection":
        if ctx.close_sse_stream is not None:
            await ctx.close_sse_stream()
        await asyncio.sleep(0.2)
        return {"content": [text("Reconnection test completed successfully")]}

    # ---- 2026-07-28 stateless-wire fixtures ----
    caps = session.client_capabilities
    if name == "test_missing_capability":
        if caps is None or caps.sampling is None:
            raise MCPError(
                code=-32021,
                message="Missing required client capability: sampling",
                data={"requiredCapabilities": {"sampling": {}}},
            )
        return {"content": [text("client declared sampling")]}
    if name == "test_streaming_elicitation":
        if raw.get("inputResponses"):
            return {"content": [text("streaming elicitation answered")]}
        return input_required(
            {"confirm": elicit_req("Please confirm", {"ok": {"type": "boolean"}}, ["ok"])}
        )
    if name == "test_trigger_tool_change":
        await bus.publish(ToolsListChanged())
        return {"content": [text("tools list changed")]}
    if name == "test_trigger_prompt_change":
        await bus.publish(PromptsListChanged())
        return {"content": [text("prompts list changed")]}

    responses = check_responses(raw.get("inputResponses"))
    state = raw.get("requestState")
    if name == "test_input_required_result_elicitation":
        answer = (responses or {}).get("user_name")
        if answer is None:
            return input_required(
                {"user_name": elicit_req("What is your name?", {"name": {"type": "string"}}, ["name"])}
            )
        return {"content": [text(f"Hello, {(answer.get('content') or {}).get('name', 'stranger')}!")]}
    if name == "test_input_required_result_sampling":
        answer = (responses or {}).get("capital_question")
        if answer is None:
            return input_required({"capital_question": sample_req("What is the capital of France?", 100)})
        return {"content": [text(f"Sampling said: {(answer.get('content') or {}).get('text', '')}")]}
    if name == "test_input_required_result_list_roots":
        answer = (responses or {}).get("client_roots")
        if answer is None:
            return input_required({"client_roots": ROOTS_REQ})
        uris = [r.get("uri") for r in answer.get("roots", []) if isinstance(r, dict)]
        return {"content": [text(f"Roots: {', '.join(map(str, uris))}")]}
    if name in ("test_input_required_result_request_state", "test_input_required_result_tampered_state"):
        if responses is None or state is None:
            return input_required(
                {"confirm": elicit_req("Please confirm", {"ok": {"type": "boolean"}}, ["ok"])}, state=name
            )
        if unseal(state) != name:
            raise MCPError(code=-32602, message="requestState belongs to another request")
        return {"content": [text("state-ok: confirmed")]}
    if name == "test_input_required_result_multiple_inputs":
        keys = {"user_name", "greeting", "client_roots"}
        if responses is None or state is None or not keys <= responses.keys():
            return input_required(
                {
                    "user_name": elicit_req("What is your name?", {"name": {"type": "string"}}, ["name"]),
                    "greeting": sample_req("Generate a greeting", 50),
                    "client_roots": ROOTS_REQ,
                },
                state="multi",
            )
        unseal(state)
        return {"content": [text("All inputs received")]}
    if name == "test_input_required_result_multi_round":
        if responses is None or state is None:
            return input_required(
                {"step1": elicit_req("Step 1: What is your name?", {"name": {"type": "string"}}, ["name"])},
                state="round-1",
            )
        stage = unseal(state)
        if stage == "round-1" and "step1" in responses:
            name_given = (responses["step1"].get("content") or {}).get("name", "")
            return input_required(
                {"step2": elicit_req("Step 2: What is your favorite color?", {"color": {"type": "string"}}, ["color"])},
                state=f"round-2:{name_given}",
            )
        if stage.startswith("round-2:") and "step2" in responses:
            color = (responses["step2"].get("content") or {}).get("color", "")
            return {"content": [text(f"{stage[8:]} likes {color}")]}
        raise MCPError(code=-32602, message="unexpected round")
    if name == "test_input_required_result_capabilities":
        if responses is not None:
            return {"content": [text("capabilities respected")]}
        wanted: dict[str, Any] = {}
        if caps is not None and caps.sampling is not None:
            wanted["question"] = sample_req("Say hello", 20)
        if caps is not None and caps.elicitation is not None:
            wanted["user_name"] = elicit_req("What is your name?", {"name": {"type": "string"}}, ["name"])
        if not wanted:
            return {"content": [text("no client capability to ask through")]}
        return input_required(wanted)
    raise MCPError(code=-32602, message=f"Unknown tool: {name}")


RESOURCES = [
    {
        "uri": "test://static-text",
        "name": "static-text",
        "description": "A static text resource",
        "mimeType": "text/plain",
    },
    {
        "uri": "test://static-binary",
        "name": "static-binary",
        "description": "A static binary resource (1x1 PNG)",
        "mimeType": "image/png",
    },
    {
        "uri": "test://watched-resource",
        "name": "watched-resource",
        "description": "A resource clients may subscribe to",
        "mimeType": "text/plain",
    },
]


async def list_resources(ctx: Any, params: Any) -> Any:
    return {"resources": RESOURCES}


async def list_templates(ctx: Any, params: Any) -> Any:
    return {
        "resourceTemplates": [
            {
                "uriTemplate": "test://template/{id}/data",
                "name": "template-data",
                "description": "Data for an id",
                "mimeType": "application/json",
            }
        ]
    }


async def read_resource(ctx: Any, params: types.ReadResourceRequestParams) -> Any:
    uri = str(params.uri)
    if uri == "test://static-text":
        return {"contents": [{"uri": uri, "mimeType": "text/plain", "text": "This is the content of the static text resource."}]}
    if uri == "test://static-binary":
        return {"contents": [{"uri": uri, "mimeType": "image/png", "blob": PNG}]}
    if uri == "test://watched-resource":
        return {"contents": [{"uri": uri, "mimeType": "text/plain", "text": "Watched resource content."}]}
    prefix, suffix = "test://template/", "/data"
    if uri.startswith(prefix) and uri.endswith(suffix) and len(uri) > len(prefix) + len(suffix):
        ident = uri[len(prefix) : -len(suffix)]
        body = json.dumps({"id": ident, "templateTest": True, "data": f"Data for ID: {ident}"}, separators=(",", ":"))
        return {"contents": [{"uri": uri, "mimeType": "application/json", "text": body}]}
    raise MCPError(code=-32602, message="Resource not found", data={"uri": uri})


PROMPTS = [
    {"name": "test_simple_prompt", "description": "A simple prompt without arguments"},
    {
        "name": "test_prompt_with_arguments",
        "description": "A prompt with two required arguments",
        "arguments": [
            {"name": "arg1", "description": "First test argument", "required": True},
            {"name": "arg2", "description": "Second test argument", "required": True},
        ],
    },
    {
        "name": "test_prompt_with_embedded_resource",
        "description": "A prompt embedding a resource",
        "arguments": [{"name": "resourceUri", "description": "URI of the resource to embed", "required": True}],
    },
    {"name": "test_prompt_with_image", "description": "A prompt with an image"},
    {"name": "test_input_required_result_prompt", "description": "MRTR on prompts/get"},
]


async def list_prompts(ctx: Any, params: Any) -> Any:
    return {"prompts": PROMPTS}


async def get_prompt(ctx: Any, params: types.GetPromptRequestParams) -> Any:
    args = params.arguments or {}
    user = lambda content: {"role": "user", "content": content}  # noqa: E731
    if params.name == "test_simple_prompt":
        return {"messages": [user(text("This is a simple prompt for testing."))]}
    if params.name == "test_prompt_with_arguments":
        return {"messages": [user(text(f"Prompt with arguments: arg1='{args.get('arg1')}', arg2='{args.get('arg2')}'"))]}
    if params.name == "test_prompt_with_embedded_resource":
        res = {"uri": args.get("resourceUri", ""), "mimeType": "text/plain", "text": "Embedded resource content for testing."}
        return {
            "messages": [
                user({"type": "resource", "resource": res}),
                user(text("Please process the embedded resource above.")),
            ]
        }
    if params.name == "test_prompt_with_image":
        return {
            "messages": [
                user({"type": "image", "data": PNG, "mimeType": "image/png"}),
                user(text("Please analyze the image above.")),
            ]
        }
    if params.name == "test_input_required_result_prompt":
        responses = check_responses((ctx.params or {}).get("inputResponses"))
        if not responses or "user_context" not in responses:
            return input_required(
                {
                    "user_context": elicit_req(
                        "What context should the prompt use?", {"context": {"type": "string"}}, ["context"]
                    )
                }
            )
        context = (responses["user_context"].get("content") or {}).get("context", "")
        return {"messages": [user(text(f"Use this context: {context}"))]}
    raise MCPError(code=-32602, message=f"Unknown prompt: {params.name}")


async def complete(ctx: Any, params: types.CompleteRequestParams) -> Any:
    values = [v for v in ("paris", "park", "party") if v.startswith(params.argument.value)] or []
    return {"completion": {"values": values, "total": len(values), "hasMore": False}}


async def empty(ctx: Any, params: Any) -> Any:
    return {}


def complete_on_2026(handler: Any) -> Any:
    """On the 2026-07-28 wire every result carries `resultType` ("complete" unless
    input_required); the 2025 wire has no such field."""

    async def wrapped(ctx: Any, params: Any) -> Any:
        result = await handler(ctx, params)
        if ctx.protocol_version >= "2026-07-28" and isinstance(result, dict) and "resultType" not in result:
            result = {"resultType": "complete", **result}
        return result

    return wrapped


async def list_tools(ctx: Any, params: Any) -> Any:
    return {"tools": TOOLS}


def build() -> Server:
    hint = CacheHint(ttl_ms=60_000, scope="public")
    c = complete_on_2026
    server = Server(
        "weft-conformance-reference",
        version="0.1.0",
        on_list_tools=c(list_tools),
        on_call_tool=c(call_tool),
        on_list_resources=c(list_resources),
        on_list_resource_templates=c(list_templates),
        on_read_resource=c(read_resource),
        on_subscribe_resource=empty,
        on_unsubscribe_resource=empty,
        on_list_prompts=c(list_prompts),
        on_get_prompt=c(get_prompt),
        on_completion=c(complete),
        on_set_logging_level=empty,
        on_subscriptions_listen=ListenHandler(bus),
        cache_hints={
            m: hint for m in ("tools/list", "prompts/list", "resources/list", "resources/templates/list", "resources/read")
        },
    )
    return server


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--port", type=int, default=3001)
    ap.add_argument("--json-response", action="store_true", help="answer POSTs with JSON instead of SSE")
    opts = ap.parse_args()
    app = build().streamable_http_app(
        event_store=MemoryEventStore(), retry_interval=500, json_response=opts.json_response, host="127.0.0.1"
    )
    uvicorn.run(app, host="127.0.0.1", port=opts.port, log_level="warning")


if __name__ == "__main__":
    main()
