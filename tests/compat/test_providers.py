"""Every provider driver through weft's OpenAI-compatible surface, with the real `openai` package.

deploy/local/test.sh starts `weft-fake-upstream`, which serves each provider's recorded wire
format (services/router/tests/fixtures/<kind>/), and configures weft with one provider per kind
pointing at it (`fake-<kind>`, model `m`) and one alias per kind (`via-<kind>`). The fake upstream
picks its answer from the request: plain text, a `get_weather` call when tools are offered, or
the answer after a tool result, so these tests check that each driver's translation survives the
whole trip: OpenAI request → weft → provider wire format → weft → OpenAI response.
"""

import json

import pytest

KINDS = ["openai", "anthropic", "gemini", "deepseek", "ollama"]
EMBEDDING_KINDS = ["openai", "gemini", "ollama"]

AFTER_TOOL = "It is 18°C and sunny in Paris."

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

TIME_TOOL = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "Current time in a time zone",
        "parameters": {
            "type": "object",
            "properties": {"tz": {"type": "string"}},
            "required": ["tz"],
        },
    },
}


@pytest.fixture(autouse=True)
def _needs_fake_upstream(fake_upstream):
    """Every test here needs weft configured against the fake upstream (see conftest)."""


def alias(kind):
    return f"via-{kind}"


def hello(kind):
    return f"Hello from {kind}!"


def assert_usage(usage):
    assert usage is not None, "usage missing"
    assert usage.prompt_tokens > 0
    assert usage.completion_tokens > 0
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


def text_messages():
    return [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Say hello."},
    ]


def tool_round_trip_messages():
    return [
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    # Not a valid id for every provider: weft must normalise it on the way out.
                    "id": "call.1/x",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call.1/x", "content": "18C sunny"},
    ]


def test_models_list_has_the_aliases(client):
    ids = {m.id for m in client.models.list()}
    missing = {alias(k) for k in KINDS} - ids
    assert not missing, f"aliases missing from /v1/models: {sorted(missing)}"


@pytest.mark.parametrize("kind", KINDS)
def test_text(client, kind):
    resp = client.chat.completions.create(model=alias(kind), messages=text_messages())
    assert resp.object == "chat.completion"
    assert len(resp.choices) == 1
    choice = resp.choices[0]
    assert choice.message.role == "assistant"
    assert choice.message.content == hello(kind)
    assert not choice.message.tool_calls
    assert choice.finish_reason == "stop"
    assert_usage(resp.usage)


@pytest.mark.parametrize("kind", KINDS)
def test_stream_text_with_usage(client, kind):
    stream = client.chat.completions.create(
        model=alias(kind),
        messages=text_messages(),
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert chunks, "stream yielded no chunks"
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == hello(kind)
    finish = [
        c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason
    ]
    assert finish == ["stop"]
    with_usage = [i for i, c in enumerate(chunks) if c.usage is not None]
    assert with_usage == [len(chunks) - 1], "usage must be in exactly one chunk, the last"
    assert chunks[-1].choices == []
    assert_usage(chunks[-1].usage)


@pytest.mark.parametrize("kind", KINDS)
def test_stream_text_without_usage(client, kind):
    stream = client.chat.completions.create(
        model=alias(kind), messages=text_messages(), stream=True
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == hello(kind)
    assert all(c.usage is None for c in chunks), "usage sent without include_usage"


@pytest.mark.parametrize("kind", KINDS)
def test_tool_call(client, kind):
    resp = client.chat.completions.create(
        model=alias(kind),
        messages=[{"role": "user", "content": "Weather in Paris?"}],
        tools=[WEATHER_TOOL, TIME_TOOL],
    )
    choice = resp.choices[0]
    assert choice.finish_reason == "tool_calls"
    calls = choice.message.tool_calls
    assert calls is not None and len(calls) == 1, calls
    call = calls[0]
    assert call.type == "function"
    assert call.id
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    assert_usage(resp.usage)


@pytest.mark.parametrize("kind", KINDS)
def test_stream_tool_call(client, kind):
    stream = client.chat.completions.create(
        model=alias(kind),
        messages=[{"role": "user", "content": "Weather in Paris?"}],
        tools=[WEATHER_TOOL, TIME_TOOL],
        stream=True,
        stream_options={"include_usage": True},
    )
    ids, names, args, finish, usage = {}, {}, {}, [], []
    for chunk in stream:
        if chunk.usage is not None:
            usage.append(chunk.usage)
        if not chunk.choices:
            continue
        for tc in chunk.choices[0].delta.tool_calls or []:
            if tc.id:
                ids[tc.index] = tc.id
            if tc.function and tc.function.name:
                names[tc.index] = tc.function.name
            if tc.function and tc.function.arguments:
                args[tc.index] = args.get(tc.index, "") + tc.function.arguments
        if chunk.choices[0].finish_reason:
            finish.append(chunk.choices[0].finish_reason)
    assert list(names.values()) == ["get_weather"], names
    (index,) = names
    assert ids.get(index), "the tool call has no id"
    assert json.loads(args.get(index, "")) == {"city": "Paris"}
    assert finish == ["tool_calls"]
    assert len(usage) == 1
    assert_usage(usage[0])


@pytest.mark.parametrize("kind", KINDS)
def test_tool_round_trip(client, kind):
    resp = client.chat.completions.create(
        model=alias(kind), messages=tool_round_trip_messages(), tools=[WEATHER_TOOL, TIME_TOOL]
    )
    choice = resp.choices[0]
    assert choice.message.content == AFTER_TOOL
    assert not choice.message.tool_calls
    assert choice.finish_reason == "stop"
    assert_usage(resp.usage)


@pytest.mark.parametrize("kind", EMBEDDING_KINDS)
def test_embeddings(client, kind):
    resp = client.embeddings.create(model=alias(kind), input=["first text", "second text"])
    assert [d.index for d in resp.data] == [0, 1]
    a, b = (d.embedding for d in resp.data)
    assert len(a) == len(b) > 0
    assert all(isinstance(x, float) for x in a + b)
    assert any(x != 0 for x in a)
    assert a != b, "different inputs gave the same vector"
    again = client.embeddings.create(model=alias(kind), input="first text").data[0].embedding
    assert again == pytest.approx(a, rel=1e-6, abs=1e-7), "embeddings are not stable"


@pytest.mark.parametrize("kind", EMBEDDING_KINDS)
def test_embeddings_dimensions(client, kind):
    resp = client.embeddings.create(
        model=alias(kind), input="sized", dimensions=5, encoding_format="float"
    )
    assert len(resp.data) == 1
    assert len(resp.data[0].embedding) == 5
