"""weft's OpenAI-compatible surface, driven by the official `openai` Python package.

Runs against the embedded deterministic `mock` provider (model `mock-1`, alias `default`):
it answers `echo: <last user text>`, calls the first offered tool when tools are given, and
answers `the tool returned: <content>` after a tool result.
"""

import base64
import json
import struct

import openai
import pytest

MODEL = "mock-1"

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}


def user(text):
    return [{"role": "user", "content": text}]


def assert_usage(usage):
    assert usage is not None, "usage missing"
    assert usage.prompt_tokens > 0
    assert usage.completion_tokens > 0
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


def assert_openai_error_shape(body, status):
    assert isinstance(body, dict) and isinstance(body.get("error"), dict), (status, body)
    error = body["error"]
    for key in ("message", "type", "code", "param"):
        assert key in error, f"error.{key} missing from {body}"
    assert isinstance(error["message"], str) and error["message"]
    assert isinstance(error["type"], str) and error["type"]
    return error


# --- chat completions -----------------------------------------------------------------------


@pytest.mark.parametrize("model", [MODEL, "default"])
def test_plain_completion(client, model):
    prompt = f"hello from the compat suite via {model}"
    resp = client.chat.completions.create(model=model, messages=user(prompt))
    assert resp.object == "chat.completion"
    assert resp.id
    assert len(resp.choices) == 1
    choice = resp.choices[0]
    assert choice.finish_reason == "stop"
    assert choice.message.role == "assistant"
    assert choice.message.content.startswith("echo: ")
    assert prompt in choice.message.content
    assert not choice.message.tool_calls
    assert_usage(resp.usage)


def test_echo_uses_last_user_message(client):
    messages = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "first question"},
        {"role": "assistant", "content": "first answer"},
        {"role": "user", "content": "second question"},
    ]
    resp = client.chat.completions.create(model=MODEL, messages=messages)
    content = resp.choices[0].message.content
    assert "second question" in content
    assert "first question" not in content


def test_array_of_parts_content(client):
    resp = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    )
    content = resp.choices[0].message.content
    assert content.startswith("echo: ")
    assert "hi" in content


def test_streamed_completion_matches_non_streamed(client):
    prompt = "stream these words one by one please"
    full = client.chat.completions.create(model=MODEL, messages=user(prompt))
    stream = client.chat.completions.create(
        model=MODEL,
        messages=user(prompt),
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert chunks, "stream yielded no chunks"
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == full.choices[0].message.content
    assert sum(1 for c in chunks if c.choices and c.choices[0].delta.content) > 1, (
        "expected the answer in more than one delta"
    )
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finish == ["stop"]

    with_usage = [i for i, c in enumerate(chunks) if c.usage is not None]
    assert with_usage == [len(chunks) - 1], "usage must be in exactly one chunk, the last"
    assert chunks[-1].choices == []
    assert_usage(chunks[-1].usage)
    # The SDK stops reading at `data: [DONE]`; a stream without it would still end quietly,
    # so the sentinel itself is checked on the wire below.
    assert stream.response.is_closed


def test_stream_wire_format_ends_with_done(http):
    body = {
        "model": MODEL,
        "messages": user("wire format"),
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    with http.stream("POST", "chat/completions", json=body) as resp:
        assert resp.status_code == 200
        assert resp.headers["content-type"].startswith("text/event-stream")
        assert resp.headers.get("x-request-id")
        data = [line[5:].strip() for line in resp.iter_lines() if line.startswith("data:")]
    assert len(data) >= 3
    assert data[-1] == "[DONE]"
    assert data.count("[DONE]") == 1
    last_chunk = json.loads(data[-2])
    assert last_chunk["choices"] == []
    assert last_chunk["usage"]["total_tokens"] > 0


# --- tools ----------------------------------------------------------------------------------


def test_tool_call_round_trip(client):
    messages = user("what is the weather in Lisbon?")
    first = client.chat.completions.create(model=MODEL, messages=messages, tools=[WEATHER_TOOL])
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    calls = choice.message.tool_calls
    assert calls is not None and len(calls) == 1
    call = calls[0]
    assert call.type == "function"
    assert call.id.startswith("call_")
    assert call.function.name == "get_weather"
    assert isinstance(json.loads(call.function.arguments), dict)
    assert_usage(first.usage)

    messages += [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.function.name, "arguments": call.function.arguments},
                }
            ],
        },
        {"role": "tool", "tool_call_id": call.id, "content": "sunny"},
    ]
    final = client.chat.completions.create(model=MODEL, messages=messages, tools=[WEATHER_TOOL])
    assert final.choices[0].finish_reason == "stop"
    assert not final.choices[0].message.tool_calls
    assert "sunny" in final.choices[0].message.content


def test_tool_choice_none_answers_in_text(client):
    resp = client.chat.completions.create(
        model=MODEL, messages=user("no tools now"), tools=[WEATHER_TOOL], tool_choice="none"
    )
    assert resp.choices[0].finish_reason == "stop"
    assert not resp.choices[0].message.tool_calls
    assert "no tools now" in resp.choices[0].message.content


def test_streamed_tool_call_assembles(client):
    stream = client.chat.completions.create(
        model=MODEL,
        messages=user("weather in Porto, streamed"),
        tools=[WEATHER_TOOL],
        stream=True,
        stream_options={"include_usage": True},
    )
    ids, names, args, finish = set(), set(), {}, []
    for chunk in stream:
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        for tc in delta.tool_calls or []:
            if tc.id:
                ids.add(tc.id)
            if tc.function and tc.function.name:
                names.add(tc.function.name)
            if tc.function and tc.function.arguments:
                args[tc.index] = args.get(tc.index, "") + tc.function.arguments
        if chunk.choices[0].finish_reason:
            finish.append(chunk.choices[0].finish_reason)
    assert len(ids) == 1 and next(iter(ids)).startswith("call_")
    assert names == {"get_weather"}
    assert list(args) == [0]
    assert isinstance(json.loads(args[0]), dict)
    assert finish == ["tool_calls"]


# --- embeddings -----------------------------------------------------------------------------


def test_embeddings_batch(client):
    resp = client.embeddings.create(model=MODEL, input=["a", "bb"])
    assert resp.model
    assert [d.index for d in resp.data] == [0, 1]
    a, bb = (d.embedding for d in resp.data)
    assert len(a) == len(bb) > 0
    assert all(isinstance(x, float) for x in a + bb)
    assert resp.usage.prompt_tokens > 0


def test_embeddings_dimensions(client):
    resp = client.embeddings.create(model=MODEL, input="a", dimensions=8)
    assert len(resp.data) == 1
    assert len(resp.data[0].embedding) == 8


def test_embeddings_float_and_base64_agree(client):
    # The SDK asks for base64 by default and decodes it; an explicit format is returned as sent.
    decoded = client.embeddings.create(model=MODEL, input="same text").data[0].embedding
    floats = client.embeddings.create(
        model=MODEL, input="same text", encoding_format="float"
    ).data[0].embedding
    raw = client.embeddings.create(
        model=MODEL, input="same text", encoding_format="base64"
    ).data[0].embedding
    assert isinstance(floats, list) and isinstance(raw, str)
    packed = base64.b64decode(raw)
    assert len(packed) == 4 * len(floats)
    from_raw = list(struct.unpack(f"<{len(floats)}f", packed))
    assert from_raw == pytest.approx(floats, rel=1e-6, abs=1e-7)
    assert decoded == pytest.approx(floats, rel=1e-6, abs=1e-7)
    assert any(x != 0 for x in floats)


# --- models and identity --------------------------------------------------------------------


def test_models_list(client):
    ids = {m.id for m in client.models.list()}
    assert {MODEL, "default", "tier:fast"} <= ids


def test_me_returns_principal(http):
    resp = http.get("me")
    assert resp.status_code == 200, resp.text
    me = resp.json()
    assert me["tenant"] == "default"
    assert isinstance(me["subject"], str) and me["subject"]
    assert "admin" in me["scopes"]


def test_request_id_header(client):
    raw = client.chat.completions.with_raw_response.create(model=MODEL, messages=user("id?"))
    assert raw.headers.get("x-request-id")
    assert raw.parse().choices[0].message.content.startswith("echo: ")


# --- errors ---------------------------------------------------------------------------------


def test_bad_token_is_401(bad_client):
    with pytest.raises(openai.AuthenticationError) as exc:
        bad_client.chat.completions.create(model=MODEL, messages=user("hi"))
    assert exc.value.status_code == 401
    assert exc.value.request_id
    assert_openai_error_shape(exc.value.response.json(), 401)


def test_missing_token_is_401(http):
    resp = http.get("models", headers={"Authorization": ""})
    assert resp.status_code == 401
    assert_openai_error_shape(resp.json(), 401)


def test_unknown_model_is_404(client):
    with pytest.raises(openai.NotFoundError) as exc:
        client.chat.completions.create(model="no-such-model", messages=user("hi"))
    assert exc.value.status_code == 404
    assert exc.value.code == "model_not_found"
    assert exc.value.request_id
    assert_openai_error_shape(exc.value.response.json(), 404)


def test_malformed_messages_is_400(client):
    with pytest.raises(openai.BadRequestError) as exc:
        client.chat.completions.create(
            model=MODEL, messages=user("placeholder"), extra_body={"messages": "not a list"}
        )
    assert exc.value.status_code == 400
    error = assert_openai_error_shape(exc.value.response.json(), 400)
    assert "messages" in error["message"]


def test_missing_model_is_400(http):
    resp = http.post("chat/completions", json={"messages": user("hi")})
    assert resp.status_code == 400, resp.text
    assert resp.headers.get("x-request-id")
    error = assert_openai_error_shape(resp.json(), 400)
    assert "model" in error["message"]


def test_invalid_json_is_400(http):
    resp = http.post(
        "chat/completions", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert resp.status_code == 400, resp.text
    assert_openai_error_shape(resp.json(), 400)
