"""Agent runs over plain HTTP + SSE, as a client in any language would use them: define an
agent, start a run that calls a tool, follow its stream to the end, re-attach with
Last-Event-ID, and read the transcript. Runs against both arrangements, so the split one proves
gateway, substrate, executor and router cooperate as separate processes."""

import json
import uuid

import httpx

from conftest import TIMEOUT


def _sse(resp):
    """(id, event, data) for each SSE frame of a streaming httpx response."""
    frame = {}
    for line in resp.iter_lines():
        if line == "":
            if "data" in frame:
                yield int(frame.get("id", "0")), frame.get("event", "message"), json.loads(frame["data"])
            frame = {}
        elif line.startswith(":"):
            continue
        else:
            key, _, value = line.partition(":")
            frame[key] = value[1:] if value.startswith(" ") else value


def _follow(http, root_url, run_id, headers=None):
    frames = []
    with http.stream("GET", f"{root_url}/v1/runs/{run_id}/stream", headers=headers or {}) as r:
        assert r.status_code == 200, r.read()
        for frame in _sse(r):
            frames.append(frame)
            if frame[1] == "run_finished":
                break
    return frames


def test_a_run_calls_a_tool_streams_and_re_attaches(root_url, token):
    name = f"compat-{uuid.uuid4().hex[:8]}"
    with httpx.Client(headers={"authorization": f"Bearer {token}"}, timeout=TIMEOUT) as http:
        r = http.put(f"{root_url}/v1/agents/{name}", json={"model": "mock-1", "tools": ["Context"]})
        assert r.status_code == 201, r.text
        assert r.json()["version"].startswith("sha256:")
        script = {"turns": [[{"name": "Context", "input": {"op": "self"}}]], "reply": "done"}
        r = http.post(f"{root_url}/v1/runs", json={"agent": name, "input": "#mock " + json.dumps(script)})
        assert r.status_code == 201, r.text
        run_id = r.json()["run_id"]

        frames = _follow(http, root_url, run_id)
        kinds = [k for _, k, _ in frames if k != "text_delta"]
        assert kinds[0] == "run_started" and kinds[-1] == "run_finished"
        assert "tool_call" in kinds and "tool_result" in kinds
        finished = frames[-1][2]["data"]
        assert finished["status"] == "succeeded" and finished["stop_reason"] == "end_turn"

        seqs = [s for s, k, _ in frames if k != "text_delta"]
        assert seqs == list(range(1, len(seqs) + 1))
        again = _follow(http, root_url, run_id, headers={"last-event-id": str(seqs[2])})
        assert [s for s, k, _ in again if k != "text_delta"] == seqs[3:]

        page = http.get(f"{root_url}/v1/runs/{run_id}/events").json()
        assert [e["seq"] for e in page["events"]] == seqs
        run = http.get(f"{root_url}/v1/runs/{run_id}").json()
        assert run["status"] == "succeeded" and run["iterations"] == 2


def test_unknown_agents_and_bad_bodies_say_what_to_fix(root_url, token):
    with httpx.Client(headers={"authorization": f"Bearer {token}"}, timeout=TIMEOUT) as http:
        r = http.post(f"{root_url}/v1/runs", json={"agent": "no-such-agent", "input": "x"})
        assert r.status_code == 404
        assert "no-such-agent" in r.json()["error"]["message"]
        r = http.post(f"{root_url}/v1/runs", json={"agent": "x", "input": "x", "max_iterations": 0})
        assert r.status_code == 400
        assert "max_iterations" in r.json()["error"]["message"]
