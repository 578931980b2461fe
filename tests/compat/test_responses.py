"""weft's Responses API (`/v1/responses`), driven by the official `openai` package and the OpenAI
Agents SDK in its default (Responses) mode.

Against the embedded `mock` provider (model `mock-1`): it answers `echo: <last user text>`,
calls the first offered tool when tools are given, and answers `the tool returned: <content>`
after a tool result. A user message may script it (`#mock {"turns": [...], "reply": "..."}`),
which is how a continuation is shown to carry the stored conversation.
"""

import asyncio
import json
import uuid

import httpx
import openai
import pytest

MODEL = "mock-1"

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Current weather for a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}


def _mint(http, tenant, subject, scopes=("llm:call",)):
    r = http.post(
        "tokens",
        json={"name": f"responses-{subject}", "tenant": tenant, "subject": subject,
              "scopes": list(scopes)},
    )
    assert r.status_code == 201, r.text
    return r.json()["token"]


@pytest.fixture(scope="module")
def other_clients(base_url, http):
    """Clients of another subject of the same tenant, and of another tenant."""
    suffix = uuid.uuid4().hex[:8]
    same = _mint(http, "default", f"responses-other-{suffix}")
    other = _mint(http, f"resp-{suffix}", f"responses-stranger-{suffix}")
    with openai.OpenAI(base_url=base_url, api_key=same, max_retries=0, timeout=30) as a, \
            openai.OpenAI(base_url=base_url, api_key=other, max_retries=0, timeout=30) as b:
        yield a, b


def test_text_answer_in_the_response_object(client):
    r = client.responses.create(model=MODEL, input="hello responses", instructions="be brief",
                                metadata={"case": "text"})
    assert r.object == "response"
    assert r.id.startswith("resp_")
    assert r.status == "completed"
    assert r.output_text == "echo: hello responses"
    assert [item.type for item in r.output] == ["message"]
    assert r.output[0].role == "assistant"
    assert r.instructions == "be brief"
    assert r.metadata == {"case": "text"}
    assert r.store is True
    assert r.usage.input_tokens > 0 and r.usage.output_tokens > 0
    assert r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens


def test_a_function_tool_round_trip_continues_the_stored_response(client):
    first = client.responses.create(model=MODEL, input="Paris", tools=[WEATHER])
    calls = [item for item in first.output if item.type == "function_call"]
    assert len(calls) == 1, first.output
    call = calls[0]
    assert call.name == "get_weather"
    assert call.id.startswith("fc_") and call.call_id
    json.loads(call.arguments)
    second = client.responses.create(
        model=MODEL, previous_response_id=first.id, tools=[WEATHER],
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}],
    )
    assert second.previous_response_id == first.id
    assert second.output_text == "the tool returned: sunny"


def test_a_continuation_replays_the_stored_conversation(client):
    script = '#mock {"turns": [], "reply": "scripted once, remembered after"}'
    first = client.responses.create(model=MODEL, input=script)
    assert first.output_text == "scripted once, remembered after"
    # The script sits in the first turn's input: only a replayed chain shows it to the model.
    second = client.responses.create(model=MODEL, previous_response_id=first.id, input="again")
    assert second.output_text == "scripted once, remembered after"
    third = client.responses.create(model=MODEL, previous_response_id=second.id, input="more")
    assert third.output_text == "scripted once, remembered after"
    alone = client.responses.create(model=MODEL, input="again")
    assert alone.output_text == "echo: again"


def test_stored_responses_are_read_deleted_and_then_gone(client):
    r = client.responses.create(model=MODEL, input="keep me")
    got = client.responses.retrieve(r.id)
    assert got.id == r.id and got.output_text == "echo: keep me"
    deleted = client.responses.delete(r.id)
    assert deleted is None or getattr(deleted, "deleted", True)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(r.id)
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model=MODEL, previous_response_id=r.id, input="go on")
    assert e.value.body["param"] == "previous_response_id"
    unstored = client.responses.create(model=MODEL, input="forget me", store=False)
    assert unstored.store is False
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(unstored.id)


def test_another_principal_never_sees_a_response(client, other_clients):
    r = client.responses.create(model=MODEL, input="mine")
    for other in other_clients:
        with pytest.raises(openai.NotFoundError):
            other.responses.retrieve(r.id)
        with pytest.raises(openai.NotFoundError):
            other.responses.delete(r.id)
        with pytest.raises(openai.BadRequestError) as e:
            other.responses.create(model=MODEL, previous_response_id=r.id, input="theirs")
        assert e.value.body["param"] == "previous_response_id"
    assert client.responses.retrieve(r.id).output_text == "echo: mine"


def test_the_stream_helper_reads_the_typed_events(client):
    with client.responses.stream(model=MODEL, input="stream me") as stream:
        events = list(stream)
        final = stream.get_final_response()
    types = [e.type for e in events]
    assert types[:2] == ["response.created", "response.in_progress"]
    assert types[-1] == "response.completed"
    assert "response.output_item.added" in types and "response.output_item.done" in types
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == "echo: stream me" == final.output_text
    assert final.status == "completed" and final.usage.total_tokens > 0
    # Stored before the last event: readable at once.
    assert client.responses.retrieve(final.id).output_text == "echo: stream me"


def test_a_streamed_function_call(client):
    events = list(client.responses.create(model=MODEL, input="Paris", tools=[WEATHER],
                                          stream=True))
    types = [e.type for e in events]
    assert "response.function_call_arguments.delta" in types
    done = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert len(done) == 1 and done[0].name == "get_weather"
    final = events[-1].response
    assert final.output[0].type == "function_call"
    assert final.output[0].arguments == done[0].arguments


def test_built_in_tools_are_refused_by_name(client):
    for tool, name in [({"type": "web_search_preview"}, "web_search_preview"),
                       ({"type": "file_search", "vector_store_ids": ["vs_1"]}, "file_search"),
                       ({"type": "computer_use_preview", "display_width": 1, "display_height": 1,
                         "environment": "linux"}, "computer_use_preview")]:
        with pytest.raises(openai.BadRequestError) as e:
            client.responses.create(model=MODEL, input="x", tools=[tool])
        assert e.value.body["param"] == "tools[0].type"
        assert name in e.value.body["message"]


def test_errors_are_in_openais_shape(client, http):
    with pytest.raises(openai.NotFoundError) as e:
        client.responses.create(model="no-such-model", input="x")
    assert e.value.body["code"] == "model_not_found"
    r = http.post("responses", json={"model": MODEL, "input": [{"type": "item_reference", "id": "x"}]})
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["param"] == "input[0].type" and err["type"] == "invalid_request_error"
    r = http.post("responses", json={"model": MODEL, "input": "x"},
                  headers={"Authorization": "Bearer wft_not_a_real_token"})
    assert r.status_code == 401 and "error" in r.json()


def test_the_agents_sdk_in_its_default_responses_mode(base_url, token):
    agents = pytest.importorskip("agents")

    @agents.function_tool
    def get_weather(city: str) -> str:
        """The current weather in a city."""
        return f"sunny in {city}"

    async def main():
        client = openai.AsyncOpenAI(base_url=base_url, api_key=token, max_retries=0,
                                    http_client=httpx.AsyncClient(timeout=30))
        agents.set_tracing_disabled(True)
        model = agents.OpenAIResponsesModel(model=MODEL, openai_client=client)
        agent = agents.Agent(name="weather", instructions="Answer with the weather tool.",
                             model=model, tools=[get_weather])
        ran = await agents.Runner.run(agent, "Paris")
        streamed = agents.Runner.run_streamed(agent, "Lyon")
        kinds = []
        async for event in streamed.stream_events():
            if event.type == "raw_response_event":
                kinds.append(event.data.type)
        return ran.final_output, streamed.final_output, kinds

    final, streamed_final, kinds = asyncio.run(main())
    assert final == "the tool returned: sunny in Paris"
    assert streamed_final == "the tool returned: sunny in Lyon"
    assert "response.function_call_arguments.delta" in kinds
    assert "response.output_text.delta" in kinds
    assert kinds.count("response.completed") == 2


CODEX_CONFIG = """\
model = "{model}"
model_provider = "weft"
web_search = "disabled"
approval_policy = "never"
sandbox_mode = "read-only"
check_for_update_on_startup = false

[agents]
enabled = false

[analytics]
enabled = false

[features]
plugins = false
apps = false

[model_providers.weft]
name = "weft"
base_url = "{base_url}"
env_key = "WEFT_API_KEY"
wire_api = "responses"
request_max_retries = 0
stream_max_retries = 0
"""


def test_the_codex_cli_completes_a_prompt(base_url, token, node_env, tmp_path):
    """`codex exec` with a custom provider whose base URL is weft (`wire_api = "responses"`):
    codex sends its own tools (all function tools with this config: web search, its agent
    namespace and plugins off) and its whole history on every turn, with `store: false`."""
    env, node = node_env
    from conftest import JS_DIR

    codex = JS_DIR / "node_modules" / "@openai" / "codex" / "bin" / "codex.js"
    assert codex.is_file(), f"{codex} missing: npm ci in {JS_DIR}"
    home = tmp_path / "codex-home"
    home.mkdir()
    (home / "config.toml").write_text(CODEX_CONFIG.format(model=MODEL, base_url=base_url))
    work = tmp_path / "work"
    work.mkdir()
    env = {k: v for k, v in env.items() if not k.startswith(("OPENAI_", "CODEX_"))}
    env.update(CODEX_HOME=str(home), WEFT_API_KEY=token)
    # The mock's script: no tool call, this reply (codex offers its own tools every turn).
    prompt = '#mock {"turns": [], "reply": "hello from weft through codex"}'
    import subprocess

    out = subprocess.run(
        [str(node), str(codex), "exec", "--skip-git-repo-check", "--ephemeral", "--strict-config",
         "-C", str(work), prompt],
        env=env, cwd=work, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=180,
    )
    detail = f"exit {out.returncode}\nstdout:\n{out.stdout[-3000:]}\nstderr:\n{out.stderr[-3000:]}"
    assert out.returncode == 0, detail
    assert out.stdout.strip().splitlines()[-1] == "hello from weft through codex", detail
