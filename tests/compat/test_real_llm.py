"""A real small model through weft: the opt-in real-LLM tier (WEFT_REAL_LLM=1).

deploy/local/test.sh starts llama.cpp's `llama-server` with Qwen2.5-Coder-0.5B-Instruct
(deploy/local/real-llm.sh) and a `weft up` with two providers in front of it:

- `llama-openai`    kind `openai`, the server's `/v1/chat/completions`    (alias `real-openai`)
- `llama-anthropic` kind `anthropic`, the server's `/v1/messages`        (alias `real-anthropic`)

Each alias is driven through both of weft's front doors: the `openai` package against
`/v1/chat/completions` and the `anthropic` package against `/v1/messages`. A real model's wording
varies, so the tests assert on structure only: text came back, a tool call with the right name
and JSON arguments happened. After a tool result this 0.5B model sometimes calls the tool again;
that is allowed.
"""

import json
import os

import pytest

openai = pytest.importorskip("openai")
anthropic = pytest.importorskip("anthropic")

pytestmark = pytest.mark.skipif(
    os.environ.get("WEFT_REAL_LLM") != "1",
    reason="the real-LLM tier is opt-in: WEFT_REAL_LLM=1 ./deploy/local/test.sh",
)

ALIASES = ["real-openai", "real-anthropic"]

# A debug build of weft and a CPU model on a shared 2-core machine: generous but bounded
# (deploy/local/test.sh gives the llama providers the same first-byte timeout).
TIMEOUT = 180.0
MAX_TOKENS = 64
TOOL_MAX_TOKENS = 128
TOOL_PROMPT = "What is the weather in Paris? Use the tool."

OPENAI_WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "The city name"}},
            "required": ["city"],
        },
    },
}

# The `anthropic` package (2.x) no longer takes `temperature` as an argument; the Messages API,
# weft's included, still does, so it goes in the body.
ZERO_TEMPERATURE = {"temperature": 0}

ANTHROPIC_WEATHER = {
    "name": "get_weather",
    "description": "Get the current weather for a city",
    "input_schema": OPENAI_WEATHER["function"]["parameters"],
}


@pytest.fixture(scope="module", autouse=True)
def _real_aliases_configured(client):
    ids = {m.id for m in client.models.list()}
    missing = set(ALIASES) - ids
    if missing:
        pytest.fail(
            f"WEFT_REAL_LLM=1 but weft has no {sorted(missing)} alias; run the tier through "
            "deploy/local/test.sh, which configures them",
            pytrace=False,
        )


@pytest.fixture(scope="module")
def oa(base_url, token):
    with openai.OpenAI(base_url=base_url, api_key=token, max_retries=0, timeout=TIMEOUT) as c:
        yield c


@pytest.fixture(scope="module")
def claude(root_url, token):
    """The `anthropic` package pointed at weft, as Claude Code users configure it."""
    with anthropic.Anthropic(
        base_url=root_url, api_key=token, max_retries=0, timeout=TIMEOUT
    ) as c:
        yield c


def say(text):
    return [{"role": "user", "content": text}]


def as_param(block):
    """A response content block as a request block (only the fields the Messages API takes)."""
    if block.type == "tool_use":
        return {"type": "tool_use", "id": block.id, "name": block.name, "input": block.input}
    if block.type == "text":
        return {"type": "text", "text": block.text}
    pytest.fail(f"unexpected content block in the answer: {block}")


def assert_openai_usage(usage):
    assert usage is not None, "usage missing"
    assert usage.prompt_tokens > 0
    assert usage.completion_tokens > 0
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


# --- the openai package against /v1/chat/completions ----------------------------------------


@pytest.mark.parametrize("model", ALIASES)
def test_chat_text(oa, model):
    resp = oa.chat.completions.create(
        model=model,
        messages=say("Say hello in one short sentence."),
        temperature=0,
        max_tokens=MAX_TOKENS,
    )
    choice = resp.choices[0]
    assert choice.message.content and choice.message.content.strip(), resp
    assert choice.finish_reason in ("stop", "length")
    assert_openai_usage(resp.usage)


@pytest.mark.parametrize("model", ALIASES)
def test_chat_stream(oa, model):
    stream = oa.chat.completions.create(
        model=model,
        messages=say("Count from one to five in words."),
        temperature=0,
        max_tokens=MAX_TOKENS,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text.strip(), "the stream carried no text"
    deltas = sum(1 for c in chunks if c.choices and c.choices[0].delta.content)
    assert deltas > 1, "expected the answer in more than one delta"
    finish = [
        c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason
    ]
    assert len(finish) == 1 and finish[0] in ("stop", "length")
    with_usage = [c.usage for c in chunks if c.usage is not None]
    assert len(with_usage) == 1
    assert_openai_usage(with_usage[0])


@pytest.mark.parametrize("model", ALIASES)
def test_chat_tool_call(oa, model):
    resp = oa.chat.completions.create(
        model=model,
        messages=say(TOOL_PROMPT),
        tools=[OPENAI_WEATHER],
        temperature=0,
        max_tokens=TOOL_MAX_TOKENS,
    )
    choice = resp.choices[0]
    calls = choice.message.tool_calls
    assert calls, f"no tool call: {choice.message}"
    assert choice.finish_reason == "tool_calls"
    assert calls[0].function.name == "get_weather"
    assert calls[0].id
    assert isinstance(json.loads(calls[0].function.arguments), dict)

    # The round trip: the model answers the tool result in text, or calls the tool again.
    messages = say(TOOL_PROMPT) + [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": calls[0].id,
                    "type": "function",
                    "function": {
                        "name": calls[0].function.name,
                        "arguments": calls[0].function.arguments,
                    },
                }
            ],
        },
        {"role": "tool", "tool_call_id": calls[0].id, "content": "18C and sunny"},
    ]
    final = oa.chat.completions.create(
        model=model,
        messages=messages,
        tools=[OPENAI_WEATHER],
        temperature=0,
        max_tokens=TOOL_MAX_TOKENS,
    )
    answer = final.choices[0]
    if answer.message.tool_calls:
        assert answer.finish_reason == "tool_calls"
        assert all(c.function.name == "get_weather" for c in answer.message.tool_calls)
    else:
        assert answer.message.content and answer.message.content.strip()


@pytest.mark.parametrize("model", ALIASES)
def test_chat_stream_tool_call(oa, model):
    stream = oa.chat.completions.create(
        model=model,
        messages=say(TOOL_PROMPT),
        tools=[OPENAI_WEATHER],
        temperature=0,
        max_tokens=TOOL_MAX_TOKENS,
        stream=True,
        stream_options={"include_usage": True},
    )
    names, args, finish, usage = {}, {}, [], []
    for chunk in stream:
        if chunk.usage is not None:
            usage.append(chunk.usage)
        if not chunk.choices:
            continue
        for tc in chunk.choices[0].delta.tool_calls or []:
            if tc.function and tc.function.name:
                names[tc.index] = tc.function.name
            if tc.function and tc.function.arguments:
                args[tc.index] = args.get(tc.index, "") + tc.function.arguments
        if chunk.choices[0].finish_reason:
            finish.append(chunk.choices[0].finish_reason)
    assert names, "no tool call in the stream"
    first = min(names)
    assert names[first] == "get_weather"
    assert isinstance(json.loads(args.get(first, "")), dict)
    assert finish == ["tool_calls"]
    assert len(usage) == 1


# --- the anthropic package against /v1/messages ---------------------------------------------


@pytest.mark.parametrize("model", ALIASES)
def test_messages_text(claude, model):
    msg = claude.messages.create(
        model=model,
        max_tokens=MAX_TOKENS,
        extra_body=ZERO_TEMPERATURE,
        system="You are a helpful assistant.",
        messages=say("Say hello in one short sentence."),
    )
    assert msg.type == "message" and msg.role == "assistant"
    texts = [b.text for b in msg.content if b.type == "text"]
    assert texts and "".join(texts).strip(), msg
    assert msg.stop_reason in ("end_turn", "max_tokens")
    assert msg.usage.input_tokens > 0
    assert msg.usage.output_tokens > 0


@pytest.mark.parametrize("model", ALIASES)
def test_messages_stream(claude, model):
    with claude.messages.stream(
        model=model,
        max_tokens=MAX_TOKENS,
        extra_body=ZERO_TEMPERATURE,
        messages=say("Count from one to five in words."),
    ) as stream:
        pieces = list(stream.text_stream)
        final = stream.get_final_message()
    assert "".join(pieces).strip(), "the stream carried no text"
    assert len(pieces) > 1, "expected the answer in more than one delta"
    assert "".join(pieces) == "".join(b.text for b in final.content if b.type == "text")
    assert final.stop_reason in ("end_turn", "max_tokens")
    assert final.usage.output_tokens > 0


@pytest.mark.parametrize("model", ALIASES)
def test_messages_tool_use(claude, model):
    msg = claude.messages.create(
        model=model,
        max_tokens=TOOL_MAX_TOKENS,
        extra_body=ZERO_TEMPERATURE,
        tools=[ANTHROPIC_WEATHER],
        messages=say(TOOL_PROMPT),
    )
    uses = [b for b in msg.content if b.type == "tool_use"]
    assert uses, f"no tool_use block: {msg.content}"
    assert msg.stop_reason == "tool_use"
    use = uses[0]
    assert use.name == "get_weather"
    assert use.id
    assert isinstance(use.input, dict)

    # The round trip: text, or (this small model does that) another call to the tool.
    final = claude.messages.create(
        model=model,
        max_tokens=TOOL_MAX_TOKENS,
        extra_body=ZERO_TEMPERATURE,
        tools=[ANTHROPIC_WEATHER],
        messages=say(TOOL_PROMPT)
        + [
            {"role": "assistant", "content": [as_param(b) for b in msg.content]},
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": use.id, "content": "18C and sunny"}
                ],
            },
        ],
    )
    again = [b for b in final.content if b.type == "tool_use"]
    if again:
        assert final.stop_reason == "tool_use"
        assert all(b.name == "get_weather" for b in again)
    else:
        assert "".join(b.text for b in final.content if b.type == "text").strip(), final


@pytest.mark.parametrize("model", ALIASES)
def test_messages_stream_tool_use(claude, model):
    with claude.messages.stream(
        model=model,
        max_tokens=TOOL_MAX_TOKENS,
        extra_body=ZERO_TEMPERATURE,
        tools=[ANTHROPIC_WEATHER],
        messages=say(TOOL_PROMPT),
    ) as stream:
        events = [e.type for e in stream]
        final = stream.get_final_message()
    assert "message_start" in events and "message_stop" in events
    uses = [b for b in final.content if b.type == "tool_use"]
    assert uses, f"no tool_use block: {final.content}"
    assert uses[0].name == "get_weather"
    assert isinstance(uses[0].input, dict)
    assert final.stop_reason == "tool_use"


# --- an agent on the real model uses the Memory tool (runs API) -----------------------------


def _run(http, agent, text):
    """Starts a run of `agent` and returns its transcript once it finished."""
    r = http.post("runs", json={"agent": agent, "input": text})
    assert r.status_code == 201, r.text
    run_id = r.json()["run_id"]
    # The stream ends at run_finished; reading it to the end is the wait.
    with http.stream("GET", f"runs/{run_id}/stream") as s:
        assert s.status_code == 200
        for _ in s.iter_lines():
            pass
    page = http.get(f"runs/{run_id}/events", params={"limit": 1000}).json()
    return run_id, page["events"]


def _memory_calls(events):
    """The inputs of the run's Memory calls (an input the model wrote as invalid JSON is kept
    by weft as its text, and counts as no call here)."""
    return [
        e["data"]["input"]
        for e in events
        if e["kind"] == "tool_call"
        and e["data"]["name"] == "Memory"
        and isinstance(e["data"]["input"], dict)
    ]


def _kinds(events):
    return [(e["kind"], e["data"].get("input") or e["data"].get("code")) for e in events]


@pytest.mark.parametrize("model", ALIASES)
def test_agent_remembers_a_fact_in_one_run_and_recalls_it_in_the_next(http, model):
    """Structure, not wording: the first run stores the fact with Memory (and it is in the
    store), the second run reads it back with Memory."""
    agent = f"rememberer-{model}"
    key = "favourite_colour"
    r = http.put(
        f"agents/{agent}",
        json={
            "model": model,
            "tools": ["Memory"],
            "memory_scopes": ["user"],
            "max_iterations": 4,
            "max_tokens": TOOL_MAX_TOKENS,
            "sampling": {"temperature": 0},
            "system_prompt": (
                "You have a Memory tool. To remember something call Memory with "
                f'{{"op": "set", "scope": "user", "key": "{key}", "value": <the fact>}}. '
                f'To recall it call Memory with {{"op": "get", "scope": "user", "key": "{key}"}}.'
            ),
        },
    )
    assert r.status_code in (200, 201), r.text
    me = http.get("me").json()

    _, events = _run(http, agent, "Remember this: my favourite colour is teal. Use the Memory tool.")
    sets = [c for c in _memory_calls(events) if c.get("op") == "set"]
    assert sets, f"the first run never called Memory set: {_kinds(events)}"
    stored = http.get(f"memory/user/{me['subject']}/{sets[0].get('key', key)}")
    assert stored.status_code == 200, stored.text
    assert "teal" in json.dumps(stored.json()["value"]).lower()

    _, events = _run(http, agent, "What is my favourite colour? Look it up with the Memory tool.")
    gets = [c for c in _memory_calls(events) if c.get("op") == "get"]
    assert gets, f"the second run never called Memory get: {_kinds(events)}"
    results = [e["data"] for e in events if e["kind"] == "tool_result"]
    assert any("teal" in r["content"].lower() for r in results), results


def _calls(events, name):
    """The inputs of the run's calls of tool `name` that parsed as JSON objects."""
    return [
        e["data"]["input"]
        for e in events
        if e["kind"] == "tool_call"
        and e["data"]["name"] == name
        and isinstance(e["data"]["input"], dict)
    ]


@pytest.mark.parametrize("model", ALIASES)
def test_agent_writes_a_file_and_then_edits_it(http, model):
    """Structure, not wording: the first run writes `hello.py` with Write (and the volume holds
    it), the second run changes it with Edit (and the file changed, recorded as an Edit)."""
    volume = f"real-{model}"
    r = http.post("volumes", json={"name": volume})
    assert r.status_code in (200, 201), r.text
    agent = f"coder-{model}"
    r = http.put(
        f"agents/{agent}",
        json={
            "model": model,
            "tools": ["Write", "Edit", "Read"],
            "volumes": [{"name": volume, "mode": "rw"}],
            "max_iterations": 4,
            "max_tokens": TOOL_MAX_TOKENS,
            "sampling": {"temperature": 0},
            "system_prompt": (
                "You work on files. To create a file call Write with "
                '{"path": "<file>", "content": "<text>"}. To change a file call Edit with '
                '{"path": "<file>", "edits": [{"old": "<exact text in the file>", "new": "<replacement>"}]}.'
            ),
        },
    )
    assert r.status_code in (200, 201), r.text

    _, events = _run(http, agent, "Create the file hello.py containing: print('hello')")
    writes = _calls(events, "Write")
    assert writes, f"the first run never called Write: {_kinds(events)}"
    path = writes[0].get("path", "hello.py")
    before = http.get(f"volumes/{volume}/files/{path}")
    results = [e["data"] for e in events if e["kind"] == "tool_result"]
    assert before.status_code == 200, (before.text, writes, results)

    _, events = _run(
        http, agent,
        f"In the file {path}, replace hello with goodbye. Use the Edit tool.",
    )
    edits = _calls(events, "Edit")
    assert edits, f"the second run never called Edit: {_kinds(events)}"
    after = http.get(f"volumes/{volume}/files/{path}")
    assert after.status_code == 200, after.text
    assert after.content != before.content, "the edit changed nothing"
    changes = http.get(f"volumes/{volume}/changes").json()["data"]
    assert {"Write", "Edit"} <= {c["source"] for c in changes}, changes


# --- a long conversation on the real model: compaction, then Recall (runs API) ---------------

# Documents long enough that three of them pass half of a 2k-token window.
FILLER = (
    "The committee met to discuss the harbour, the tides, the lighthouse keepers' rota and the "
    "repainting of the fishing boats. Nothing was decided and everyone went home for tea. "
) * 7


def _wait_parked(http, run_id, after):
    """Waits, on the run's stream from `after`, for it to park or finish; the last seq seen."""
    last = after
    with http.stream("GET", f"runs/{run_id}/stream", params={"from_seq": after + 1}) as s:
        assert s.status_code == 200
        kind = None
        for line in s.iter_lines():
            if line.startswith("id:"):
                last = int(line[3:].strip())
            elif line.startswith("event:"):
                kind = line[6:].strip()
            elif not line and kind in ("awaiting_input", "run_finished"):
                return last, kind
    return last, None


def test_a_long_conversation_compacts_and_recalls_what_it_folded(http):
    """Structure, not wording: on the real model with a 2k-token window (`window_tokens`), a
    conversation of long documents is compacted automatically (a `context_compacted` event with
    a summary the model wrote), and asked for a fact of the folded part, the model calls Recall,
    whose result holds it. The run then answers and parks, or (this 0.5B model repeats calls)
    reaches max_iterations; either way it does not fail."""
    model = "real-openai"
    agent = "compactor"
    r = http.put(
        f"agents/{agent}",
        json={
            "model": model,
            "tools": ["Recall"],
            # Six turns before the question, three after it.
            "max_iterations": 9,
            "max_tokens": 2 * TOOL_MAX_TOKENS,
            "sampling": {"temperature": 0},
            "system_prompt": (
                "You read documents and answer briefly. Earlier parts of this conversation may "
                "have been summarised; to read them again call Recall with "
                '{"op": "search", "query": "<a word to find>"}.'
            ),
            "compaction": {
                "auto_percent": 50,
                "keep_turns": 1,
                "window_tokens": 2048,
                "model": model,
            },
        },
    )
    assert r.status_code in (200, 201), r.text
    r = http.post(
        "runs",
        json={
            "agent": agent,
            "interactive": True,
            "input": "I will send you some documents. Reply OK to each one.",
        },
    )
    assert r.status_code == 201, r.text
    run_id = r.json()["run_id"]
    last, kind = _wait_parked(http, run_id, 0)
    assert kind == "awaiting_input", kind
    documents = [
        f"Document A. The password of the harbour gate is PELICAN. {FILLER} Reply OK.",
        f"Document B. {FILLER} Reply OK.",
        f"Document C. {FILLER} Reply OK.",
        f"Document D. {FILLER} Reply OK.",
        "What is the password of the harbour gate? Search for PELICAN with the Recall tool.",
    ]
    for i, text in enumerate(documents):
        r = http.post(f"runs/{run_id}/input", json={"text": text})
        assert r.status_code in (200, 202), r.text
        last, kind = _wait_parked(http, run_id, last)
        # After the question this small model may call Recall again until max_iterations.
        if i < len(documents) - 1 or kind != "run_finished":
            assert kind == "awaiting_input", f"the run ended: {kind}"
    run = http.get(f"runs/{run_id}").json()
    assert run["status"] in ("awaiting_input", "succeeded"), run

    page = http.get(f"runs/{run_id}/events", params={"limit": 1000}).json()
    events = page["data"]
    compactions = [e["data"] for e in events if e["kind"] == "context_compacted"]
    assert compactions, f"nothing was compacted: {_kinds(events)}"
    assert all(c["trigger"] == "auto" for c in compactions), compactions
    assert all(c["after_tokens"] < c["before_tokens"] for c in compactions), compactions
    assert any(c["summary"].strip() for c in compactions), compactions
    recalls = _calls(events, "Recall")
    assert recalls, f"the model never called Recall: {_kinds(events)}"
    ids = {
        e["data"]["id"]
        for e in events
        if e["kind"] == "tool_call" and e["data"]["name"] == "Recall"
    }
    results = [
        e["data"] for e in events if e["kind"] == "tool_result" and e["data"]["tool_use_id"] in ids
    ]
    assert any("PELICAN" in r["content"] for r in results), results
    if run["status"] == "awaiting_input":
        answers = [e for e in events if e["kind"] == "assistant_message"]
        last_answer = answers[-1]["data"]["message"]["content"]
        assert any(b.get("text", "").strip() for b in last_answer), last_answer
        http.post(f"runs/{run_id}/cancel")
