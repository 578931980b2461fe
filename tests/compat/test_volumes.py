"""Volumes, black-box over HTTP against a running fleet: a scripted (`#mock`) agent works on the
files of a volume through the file tools (write, exact and whitespace-tolerant edits, grep, move,
glob), an ambiguous edit is refused, bindings narrow and never widen (a `ro` binding refuses
writes; a sub-run cannot reach a volume its parent lacks), another tenant sees nothing, and a
tar import/export round-trips byte for byte while bombs and escaping names are refused."""

import io
import json
import secrets
import tarfile

import httpx
import pytest

from conftest import TIMEOUT, run_finished



def _agent(http, name, **content):
    r = http.put(f"agents/{name}", json={"model": "mock-1", **content})
    assert r.status_code in (200, 201), r.text


def _volume(http, **body):
    name = body.setdefault("name", f"ws-{secrets.token_hex(4)}")
    r = http.post("volumes", json=body)
    assert r.status_code in (200, 201), r.text
    return name


def _run(http, agent, script, **body):
    r = http.post("runs", json={"agent": agent, "input": "#mock " + json.dumps(script), **body})
    assert r.status_code == 201, r.text
    run_id = r.json()["run_id"]
    run = run_finished(http, run_id)
    events = http.get(f"runs/{run_id}/events", params={"limit": 500}).json()["events"]
    return run, events


def _results(events):
    """The tool results of a run, in order, with their content parsed when it is JSON."""
    out = []
    for e in events:
        if e["kind"] != "tool_result":
            continue
        d = dict(e["data"])
        if isinstance(d.get("content"), str):
            try:
                d["content"] = json.loads(d["content"])
            except ValueError:
                pass
        out.append(d)
    return out


def _one_call_per_turn(calls, reply="done"):
    return {"turns": [[c] for c in calls], "reply": reply}


def _file(http, volume, path):
    return http.get(f"volumes/{volume}/files/{path}")


def test_an_agent_writes_edits_greps_and_moves_files(http):
    volume = _volume(http)
    name = f"vol-agent-{secrets.token_hex(4)}"
    _agent(http, name, tools=["Write", "Edit", "Grep", "Move", "Glob", "Read"],
           volumes=[{"name": volume, "mode": "rw"}])
    source = "def f():\n    return 1\n\nprint(f())\n"
    script = _one_call_per_turn([
        {"name": "Write", "input": {"path": "a.py", "content": source}},
        {"name": "Edit", "input": {"path": "a.py", "edits": [{"old": "return 1", "new": "return 2"}]}},
        # Whitespace differs from the file's (indentation, inner runs): one candidate, applied.
        {"name": "Edit", "input": {"path": "a.py", "edits": [
            {"old": "def   f():\n  return 2", "new": "def f():\n    return 3"}]}},
        {"name": "Write", "input": {"path": "notes/b.txt", "content": "\talpha\n    alpha\nbeta\n"}},
        # Matches both `alpha` lines once whitespace is ignored: refused, never guessed.
        {"name": "Edit", "input": {"path": "notes/b.txt", "edits": [{"old": "alpha\t\t", "new": "gamma"}]}},
        {"name": "Grep", "input": {"pattern": "return", "mode": "content"}},
        {"name": "Move", "input": {"from": "a.py", "to": "src/a.py"}},
        {"name": "Glob", "input": {"pattern": "**/*.py"}},
        {"name": "Read", "input": {"path": "src/a.py"}},
    ])
    run, events = _run(http, name, script)
    assert run["status"] == "succeeded", run
    results = _results(events)
    assert len(results) == 9, results
    errors = [i for i, r in enumerate(results) if r.get("is_error")]
    assert errors == [4], results
    write, exact, fuzzy, _, ambiguous, grep, move, glob, read = results
    for mutation in (write, exact, fuzzy, move):
        assert len(mutation["content"]["sha256"]) == 64, mutation
    assert "+    return 2" in exact["content"]["diff"], exact
    assert fuzzy["content"].get("fuzzy") is True, fuzzy
    assert exact["content"].get("fuzzy") in (None, False), exact
    assert "2 " in str(ambiguous["content"]) or "matches" in str(ambiguous["content"]), ambiguous
    assert "return 3" in json.dumps(grep["content"]), grep
    assert "src/a.py" in json.dumps(glob["content"]), glob
    assert "return 3" in json.dumps(read["content"]), read

    expected = "def f():\n    return 3\n\nprint(f())\n"
    r = _file(http, volume, "src/a.py")
    assert r.status_code == 200 and r.text == expected, r.text
    assert r.headers["etag"].strip('"') == move["content"]["sha256"]
    assert _file(http, volume, "a.py").status_code == 404
    assert _file(http, volume, "notes/b.txt").text == "\talpha\n    alpha\nbeta\n"
    # One changelog row per mutation: two writes, two edits and a move; the refused edit none.
    changes = http.get(f"volumes/{volume}/changes", params={"run_id": run["id"] if "id" in run else run["run_id"]}).json()["data"]
    assert len(changes) == 5, changes
    assert sorted(c["source"] for c in changes) == ["Edit", "Edit", "Move", "Write", "Write"]


def test_bindings_narrow_and_never_widen(http):
    volume = _volume(http)
    other = _volume(http)
    ro = f"vol-ro-{secrets.token_hex(4)}"
    _agent(http, ro, tools=["Write", "Read"], volumes=[{"name": volume, "mode": "ro"}])
    run, events = _run(http, ro, _one_call_per_turn([
        {"name": "Write", "input": {"path": "x.txt", "content": "no"}}]))
    [write] = _results(events)
    assert write["is_error"] and "read-only" in json.dumps(write["content"]), write
    assert _file(http, volume, "x.txt").status_code == 404

    unbound = f"vol-none-{secrets.token_hex(4)}"
    _agent(http, unbound, tools=["Write"])
    _, events = _run(http, unbound, _one_call_per_turn([
        {"name": "Write", "input": {"path": "x.txt", "content": "no"}}]))
    [write] = _results(events)
    assert write["is_error"] and "no volume" in json.dumps(write["content"]), write

    # The child's definition binds `other` rw; its parent binds only `volume`: the sub-run's
    # bindings are the intersection, so it has none and its write is refused.
    child = f"vol-child-{secrets.token_hex(4)}"
    _agent(http, child, tools=["Write"], volumes=[{"name": other, "mode": "rw"}])
    parent = f"vol-parent-{secrets.token_hex(4)}"
    _agent(http, parent, tools=["Agent"], volumes=[{"name": volume, "mode": "rw"}])
    child_script = "#mock " + json.dumps(_one_call_per_turn([
        {"name": "Write", "input": {"path": "widened.txt", "content": "no"}}]))
    run, events = _run(http, parent, _one_call_per_turn([
        {"name": "Agent", "input": {"op": "spawn", "agent": child, "input": child_script}}]))
    assert run["status"] == "succeeded", run
    assert _file(http, other, "widened.txt").status_code == 404
    # The caller of POST /v1/runs may narrow to read-only as well.
    rw = f"vol-rw-{secrets.token_hex(4)}"
    _agent(http, rw, tools=["Write"], volumes=[{"name": volume, "mode": "rw"}])
    _run(http, rw, _one_call_per_turn([{"name": "Write", "input": {"path": "y.txt", "content": "no"}}]),
         volumes=[{"name": volume, "mode": "ro"}])
    assert _file(http, volume, "y.txt").status_code == 404


def _tar(members):
    """A tar of (name, bytes, mode) regular files, plus (name, None, target) symlinks."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as t:
        for name, data, mode in members:
            info = tarfile.TarInfo(name)
            if data is None:
                info.type = tarfile.SYMTYPE
                info.linkname = mode
                t.addfile(info)
            else:
                info.size = len(data)
                info.mode = mode
                t.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _members(data):
    with tarfile.open(fileobj=io.BytesIO(data)) as t:
        return {m.name: (t.extractfile(m).read(), m.mode & 0o111 != 0) for m in t.getmembers() if m.isfile()}


def test_tar_import_and_export_round_trip_and_refuse_bombs_and_escapes(http):
    volume = _volume(http)
    deep = "d/" + "/".join(["deeper"] * 20) + "/leaf.txt"
    members = [
        ("README.md", b"# hi\n", 0o644),
        ("bin/run.sh", b"#!/bin/sh\necho ok\n", 0o755),
        ("data/blob.bin", bytes(range(256)) * 300, 0o644),
        (deep, "ünïcode ✓\n".encode(), 0o644),
    ]
    # More small files than one blob batch holds (the substrate takes 1,000 a call).
    members += [(f"many/{i:04d}.txt", f"{i}\n".encode(), 0o644) for i in range(1500)]
    body = _tar(members)
    r = http.post(f"volumes/{volume}/import", content=body,
                  headers={"content-type": "application/x-tar"})
    assert r.status_code in (200, 201), r.text
    r = http.get(f"volumes/{volume}/export")
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/x-tar")
    assert _members(r.content) == {n: (d, m & 0o111 != 0) for n, d, m in members}
    assert _file(http, volume, "data/blob.bin").content == bytes(range(256)) * 300

    def refused(data, *words):
        r = http.post(f"volumes/{volume}/import", content=data,
                      headers={"content-type": "application/x-tar"})
        assert r.status_code == 400, r.text
        err = r.json()["error"]
        assert err.get("param") == "body", err
        for w in words:
            assert w in err["message"], err

    refused(_tar([("../evil.txt", b"x", 0o644)]), "../evil.txt")
    refused(_tar([("ok.txt", b"x", 0o644), ("link", None, "/etc/passwd")]), "link")
    # A size bomb: one entry whose header claims more than a volume may hold; the body stops
    # after the header, so only the header could have been read.
    info = tarfile.TarInfo("huge.bin")
    info.size = 64 * 1024 * 1024 * 1024
    refused(info.tobuf(format=tarfile.GNU_FORMAT), "huge.bin")
    # A count bomb: more entries than a volume may hold files.
    many = _tar([(f"f/{i}", b"", 0o644) for i in range(10_001)])
    refused(many)
    # Nothing of the refused archives landed.
    r = http.get(f"volumes/{volume}/export")
    assert _members(r.content) == {n: (d, m & 0o111 != 0) for n, d, m in members}


def test_another_tenant_sees_none_of_a_volume(http, root_url):
    volume = _volume(http)
    r = http.put(f"volumes/{volume}/files/secret.txt", content=b"mine")
    assert r.status_code in (200, 201), r.text
    tenant = f"t{secrets.token_hex(4)}"
    r = http.post("tokens", json={"name": "vol", "tenant": tenant, "subject": "eve",
                                  "scopes": ["tenant:admin"]})
    assert r.status_code == 201, r.text
    with httpx.Client(base_url=f"{root_url}/v1/", timeout=TIMEOUT,
                      headers={"authorization": f"Bearer {r.json()['token']}"}) as eve:
        for method, path in [
            ("GET", f"volumes/{volume}"),
            ("GET", f"volumes/{volume}/tree"),
            ("GET", f"volumes/{volume}/files/secret.txt"),
            ("PUT", f"volumes/{volume}/files/secret.txt"),
            ("DELETE", f"volumes/{volume}/files/secret.txt"),
            ("GET", f"volumes/{volume}/export"),
            ("GET", f"volumes/{volume}/changes"),
            ("GET", f"volumes/{volume}/snapshots"),
            ("DELETE", f"volumes/{volume}"),
        ]:
            r = eve.request(method, path, content=b"theirs" if method == "PUT" else None)
            assert r.status_code == 404, (method, path, r.status_code, r.text)
        assert volume not in json.dumps(eve.get("volumes").json())
    assert _file(http, volume, "secret.txt").content == b"mine"


def test_undo_never_clobbers_a_later_edit(http):
    volume = _volume(http)
    r = http.put(f"volumes/{volume}/files/a.txt", content=b"one\n")
    first = r.headers["etag"].strip('"')
    r = http.put(f"volumes/{volume}/files/a.txt", content=b"two\n", headers={"if-match": f'"{first}"'})
    assert r.status_code in (200, 201), r.text
    # A stale If-Match is a 412.
    r = http.put(f"volumes/{volume}/files/a.txt", content=b"three\n", headers={"if-match": f'"{first}"'})
    assert r.status_code == 412, r.text
    changes = http.get(f"volumes/{volume}/changes").json()["data"]
    older, newer = changes[1], changes[0]
    r = http.post(f"volumes/{volume}/undo", json={"change_id": older["id"]})
    assert r.status_code == 409 and "a.txt" in r.json()["error"]["message"], r.text
    r = http.post(f"volumes/{volume}/undo", json={"change_id": newer["id"]})
    assert r.status_code == 200, r.text
    assert _file(http, volume, "a.txt").content == b"one\n"
    snap = http.post(f"volumes/{volume}/snapshots", json={"label": "one"}).json()
    http.put(f"volumes/{volume}/files/b.txt", content=b"later\n")
    r = http.post(f"volumes/{volume}/snapshots/{snap['id']}/restore", json={})
    assert r.status_code == 200, r.text
    assert _file(http, volume, "b.txt").status_code == 404


@pytest.mark.parametrize("path", ["..%2Fescape", "a%2F..%2F..%2Fb", "%00nul"])
def test_escaping_paths_are_refused_naming_the_field(http, path):
    volume = _volume(http)
    r = http.put(f"volumes/{volume}/files/{path}", content=b"x")
    assert r.status_code == 400, (path, r.text)
    assert r.json()["error"].get("param") == "path", r.text
