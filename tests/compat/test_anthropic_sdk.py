"""weft's Anthropic-compatible surface (`/v1/messages`), driven by the official `anthropic` package.

The SDK is pointed at weft's origin (it appends /v1/messages itself) and sends the wft_ token in
`x-api-key`, as it would send an Anthropic key. It runs against the embedded `mock` provider
(model `mock-1`, alias `default`): it answers `echo: <last user text>`, calls the first offered
tool when tools are given, answers `the tool returned: <content>` after a tool result, and follows
a `#mock {"turns": …}` script line when the conversation has one.
"""

import json

import anthropic
import httpx
import pytest

MODEL = "mock-1"
# As in conftest: generous for a debug build on a busy machine, small enough that a hang fails.
TIMEOUT = 30.0

WEATHER_TOOL = {
    "name": "get_weather",
    "description": "Current weather for a city",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}


@pytest.fixture(scope="module")
def claude(root_url, token):
    """The official SDK as a user would configure it for weft; no retries."""
    with anthropic.Anthropic(
        base_url=root_url, api_key=token, max_retries=0, timeout=TIMEOUT
    ) as c:
        yield c


def user(text):
    return [{"role": "user", "content": text}]


def script(*calls):
    """A user turn whose `#mock` script makes `calls` (name, input) in parallel."""
    turns = [[{"name": n, "input": i} for n, i in calls]]
    return "#mock " + json.dumps({"turns": turns})


@pytest.mark.parametrize("model", [MODEL, "default"])
def test_messages_create_answers_text(claude, model):
    resp = claude.messages.create(
        model=model,
        max_tokens=64,
        system="be brief",
        messages=user(f"hello from the anthropic sdk via {model}"),
    )
    assert resp.type == "message"
    assert resp.role == "assistant"
    assert resp.id.startswith("msg_")
    assert resp.model == model
    assert [b.type for b in resp.content] == ["text"]
    assert resp.content[0].text == f"echo: hello from the anthropic sdk via {model}"
    assert resp.stop_reason == "end_turn"
    assert resp.stop_sequence is None
    assert resp.usage.input_tokens > 0
    assert resp.usage.output_tokens > 0


def test_messages_stream_text_and_final_message(claude):
    with claude.messages.stream(
        model=MODEL, max_tokens=64, messages=user("one two three four")
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == "echo: one two three four"
    assert [b.type for b in final.content] == ["text"]
    assert final.content[0].text == text
    assert final.stop_reason == "end_turn"
    # message_start carries zero usage; message_delta's real numbers are merged in.
    assert final.usage.input_tokens > 0
    assert final.usage.output_tokens > 0


def test_tool_use_then_tool_result_round_trip(claude):
    messages = user("What is the weather in Paris?")
    first = claude.messages.create(
        model=MODEL, max_tokens=64, tools=[WEATHER_TOOL], messages=messages
    )
    assert first.stop_reason == "tool_use"
    calls = [b for b in first.content if b.type == "tool_use"]
    assert len(calls) == 1
    call = calls[0]
    assert call.name == "get_weather"
    assert isinstance(call.input, dict), "tool input arrives parsed"
    assert call.id

    messages += [
        {"role": "assistant", "content": first.content},
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": call.id, "content": "18C sunny"}
            ],
        },
    ]
    second = claude.messages.create(
        model=MODEL, max_tokens=64, tools=[WEATHER_TOOL], messages=messages
    )
    assert second.stop_reason == "end_turn"
    assert [b.type for b in second.content] == ["text"]
    assert second.content[0].text == "the tool returned: 18C sunny"


def test_scripted_tool_input_is_parsed(claude):
    resp = claude.messages.create(
        model=MODEL,
        max_tokens=64,
        tools=[WEATHER_TOOL, {"name": "get_time", "input_schema": {"type": "object"}}],
        tool_choice={"type": "auto"},
        messages=user(
            script(("get_weather", {"city": "Paris"}), ("get_time", {"tz": "Europe/Paris"}))
        ),
    )
    assert resp.stop_reason == "tool_use"
    assert [(b.name, b.input) for b in resp.content] == [
        ("get_weather", {"city": "Paris"}),
        ("get_time", {"tz": "Europe/Paris"}),
    ]


def test_streamed_tool_use_assembles(claude):
    with claude.messages.stream(
        model=MODEL,
        max_tokens=64,
        tools=[WEATHER_TOOL],
        messages=user(script(("get_weather", {"city": "Paris"}))),
    ) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_message()
    assert "input_json" in kinds, kinds
    assert final.stop_reason == "tool_use"
    assert len(final.content) == 1
    block = final.content[0]
    assert block.type == "tool_use"
    assert block.name == "get_weather"
    assert block.input == {"city": "Paris"}


def test_bearer_auth_token_works_too(root_url, token):
    # Claude Code may send `Authorization: Bearer` instead of x-api-key.
    with anthropic.Anthropic(
        base_url=root_url, auth_token=token, max_retries=0, timeout=TIMEOUT
    ) as c:
        resp = c.messages.create(model=MODEL, max_tokens=16, messages=user("bearer"))
    assert resp.content[0].text == "echo: bearer"


def test_count_tokens_estimates(claude):
    resp = claude.messages.count_tokens(
        model=MODEL, system="be brief", messages=user("x" * 400)
    )
    assert 100 <= resp.input_tokens < 200


def test_bad_key_is_authentication_error(root_url):
    with anthropic.Anthropic(
        base_url=root_url, api_key="wft_not_a_real_token", max_retries=0, timeout=TIMEOUT
    ) as c:
        with pytest.raises(anthropic.AuthenticationError) as err:
            c.messages.create(model=MODEL, max_tokens=16, messages=user("hi"))
    assert err.value.status_code == 401
    assert err.value.body["type"] == "error"
    assert err.value.body["error"]["type"] == "authentication_error"


def test_unknown_model_is_not_found(claude):
    with pytest.raises(anthropic.NotFoundError) as err:
        claude.messages.create(model="no-such-model", max_tokens=16, messages=user("hi"))
    assert err.value.body["error"]["type"] == "not_found_error"
    assert "no-such-model" in err.value.body["error"]["message"]


def test_server_tools_are_refused_with_a_reason(claude):
    with pytest.raises(anthropic.BadRequestError) as err:
        claude.messages.create(
            model=MODEL,
            max_tokens=16,
            tools=[{"type": "web_search_20250305", "name": "web_search"}],
            messages=user("search"),
        )
    assert err.value.body["error"]["type"] == "invalid_request_error"
    assert "tools[0].type" in err.value.body["error"]["message"]


def test_missing_max_tokens_is_400_in_anthropic_shape(root_url, token):
    # The SDK insists on max_tokens, so this one goes over plain HTTP, keyed as the SDK keys.
    r = httpx.post(
        root_url + "/v1/messages",
        headers={"x-api-key": token, "anthropic-version": "2023-06-01"},
        json={"model": MODEL, "messages": user("hi")},
        timeout=TIMEOUT,
    )
    assert r.status_code == 400
    body = r.json()
    assert body["type"] == "error"
    assert body["error"]["type"] == "invalid_request_error"
    assert "max_tokens" in body["error"]["message"]
