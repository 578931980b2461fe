"""Schedules, black-box: a schedule fires on its cron (six fields, every second) until
`max_fires`, `run-now` is a distinct fire, pause/resume and the state route report it, and
`on_complete` writes memory from the run's final text. Against `weft up` the scheduler runs
in-process; in the split arrangement it is a separate `weft-ingress` process."""

import time
import uuid

import httpx
import pytest

TIMEOUT = 30.0


@pytest.fixture()
def api(root_url, token):
    with httpx.Client(
        base_url=root_url, headers={"Authorization": f"Bearer {token}"}, timeout=TIMEOUT
    ) as c:
        yield c


def _wait(what, cond, timeout=60.0):
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def _agent(api):
    name = f"sched-agent-{uuid.uuid4().hex[:8]}"
    r = api.put(f"/v1/agents/{name}", json={"model": "mock-1"})
    assert r.status_code in (200, 201), r.text
    return name


def test_a_schedule_fires_until_max_fires_and_writes_memory_after_each_run(api):
    agent = _agent(api)
    name = f"every-second-{uuid.uuid4().hex[:8]}"
    key = f"sched-{uuid.uuid4().hex[:8]}"
    r = api.put(
        f"/v1/schedules/{name}",
        json={
            "cron": "* * * * * *",
            "agent": agent,
            "input": "tick",
            "max_fires": 2,
            "metadata": {"purpose": "compat"},
            "on_complete": [
                {"action": "memory.set", "key": key, "value": "{{run.final_text}} ({{run.status}})"}
            ],
        },
    )
    assert r.status_code == 201, r.text
    assert r.json()["content"]["timezone"] == "UTC"

    def settled():
        # The claim (count, retirement) commits before the fires' runs are made: wait for both.
        s = api.get(f"/v1/schedules/{name}/state").json()
        cron = [f for f in s.get("fires", []) if f["kind"] == "cron"]
        done = len(cron) == 2 and all(f["status"] != "claimed" for f in cron)
        return s if s.get("retired") and s["cron_fires"] == 2 and done else None

    state = _wait("two cron fires, their runs and a retirement", settled)
    assert state["retired_why"] == "max_fires reached", state
    assert state["next_fire_at"] is None
    fires = [f for f in state["fires"] if f["kind"] == "cron"]
    assert len(fires) == 2 and all(f["status"] == "dispatched" for f in fires), fires
    # Consecutive seconds, one run each.
    assert len({f["run_id"] for f in fires}) == 2
    run = api.get(f"/v1/runs/{fires[0]['run_id']}").json()
    assert run["agent"] == agent
    assert run["metadata"]["schedule"] == name
    assert run["metadata"]["purpose"] == "compat"
    assert run["metadata"]["fire_kind"] == "cron"

    # on_complete: memory holds the last run's final text.
    entry = _wait(
        "on_complete memory.set",
        lambda: (
            r.json()
            if (r := api.get(f"/v1/memory/tenant/default/{key}")).status_code == 200
            else None
        ),
    )
    assert entry["value"].endswith("(succeeded)"), entry
    assert "tick" in entry["value"], entry

    # A retired schedule cannot be run now; the answer says why.
    r = api.post(f"/v1/schedules/{name}/run-now")
    assert r.status_code == 409, r.text
    assert "max_fires" in r.json()["error"]["message"]


def test_run_now_pause_resume_and_delete(api):
    agent = _agent(api)
    name = f"yearly-{uuid.uuid4().hex[:8]}"
    # Midnight on 1 January in Tokyo: never during this test.
    r = api.put(
        f"/v1/schedules/{name}",
        json={"cron": "0 0 1 1 *", "timezone": "Asia/Tokyo", "agent": agent, "input": "now"},
    )
    assert r.status_code == 201, r.text
    before = api.get(f"/v1/schedules/{name}/state").json()
    assert before["next_fire_at"].endswith(("-12-31T15:00:00Z",)), before

    r = api.post(f"/v1/schedules/{name}/run-now")
    assert r.status_code == 202, r.text
    fired = r.json()
    assert fired["run_id"], fired
    after = api.get(f"/v1/schedules/{name}/state").json()
    # A distinct fire: next_fire_at did not move.
    assert after["next_fire_at"] == before["next_fire_at"]
    assert after["run_now_fires"] == 1 and after["fire_count"] == 1
    assert after["last_run_id"] == fired["run_id"]
    run = api.get(f"/v1/runs/{fired['run_id']}").json()
    assert run["metadata"]["fire_kind"] == "run_now"

    r = api.post(f"/v1/schedules/{name}/pause")
    assert r.status_code == 200 and r.json()["paused"] is True, r.text
    r = api.post(f"/v1/schedules/{name}/resume")
    assert r.status_code == 200 and r.json()["paused"] is False, r.text
    assert r.json()["next_fire_at"] == before["next_fire_at"]

    r = api.delete(f"/v1/schedules/{name}")
    assert r.status_code == 204, r.text
    state = api.get(f"/v1/schedules/{name}/state").json()
    assert state["retired"] is True and state["next_fire_at"] is None, state


def test_bad_schedules_say_what_to_fix(api):
    agent = _agent(api)
    cases = [
        ({"cron": "61 * * * *", "agent": agent, "input": "x"}, "cron"),
        ({"cron": "* * * * *", "timezone": "Mars/Olympus", "agent": agent, "input": "x"}, "timezone"),
        ({"cron": "0 0 30 2 *", "agent": agent, "input": "x"}, "cron"),
        ({"cron": "* * * * *", "agent": agent, "input": "x", "overlap": "sometimes"}, "overlap"),
        (
            {
                "cron": "* * * * *",
                "agent": agent,
                "input": "x",
                "on_complete": [{"action": "memory.set", "key": "k", "value": "{{run.secret}}"}],
            },
            "on_complete",
        ),
    ]
    for body, field in cases:
        r = api.put(f"/v1/schedules/bad-{uuid.uuid4().hex[:8]}", json=body)
        assert r.status_code == 400, (body, r.text)
        err = r.json()["error"]
        assert err["code"] == "invalid_request"
        assert field in (err.get("param") or "") + err["message"], (body, err)


def test_another_tenants_schedule_is_not_found(api, root_url):
    agent = _agent(api)
    name = f"private-{uuid.uuid4().hex[:8]}"
    r = api.put(
        f"/v1/schedules/{name}",
        json={"cron": "0 0 1 1 *", "agent": agent, "input": "x"},
    )
    assert r.status_code == 201, r.text
    tenant = f"other{uuid.uuid4().hex[:6]}"
    r = api.post(
        "/v1/tokens",
        json={"name": "other", "tenant": tenant, "subject": "eve", "scopes": ["tenant:admin"]},
    )
    assert r.status_code == 201, r.text
    other = r.json()["token"]
    with httpx.Client(
        base_url=root_url, headers={"Authorization": f"Bearer {other}"}, timeout=TIMEOUT
    ) as eve:
        for method, path in [
            ("GET", f"/v1/schedules/{name}/state"),
            ("POST", f"/v1/schedules/{name}/run-now"),
            ("POST", f"/v1/schedules/{name}/pause"),
            ("DELETE", f"/v1/schedules/{name}"),
        ]:
            r = eve.request(method, path)
            assert r.status_code == 404, (method, path, r.text)
    state = api.get(f"/v1/schedules/{name}/state").json()
    assert state["paused"] is False and state["retired"] is False and state["fire_count"] == 0
