"""`volumes`: what the file tools and the volume routes cost weft.

- **File tool calls**: runs of an instant mock model whose script makes `--calls` tool calls,
  one per turn — Write, Edit, Read in turn on a file of a named volume — against the same runs
  with the no-op `Context` tool in their place. weft CPU per file tool call is the difference of
  the two batches' weft CPU divided by the calls (so the run loop's own cost cancels out); both
  absolute figures are reported beside it.
- **Import/export**: a `--files`-file tar of `--tree-mb` MB (text, compressible like code) into
  an empty volume and back out, byte for byte checked; wall time and weft CPU of each.
- **Grep**: `--grep-mb` MB of text in 500 files, `Grep`'s HTTP-free path measured through the
  MCP-less route the tool uses (the substrate's Grep over gRPC, via a run calling `Grep`):
  wall time and weft CPU per grep over the whole volume.
"""

import io
import json
import tarfile
import threading
import time
import urllib.request

from ..common import BenchError, cpu_ms, log, postgres_pids, table

HELP = "file tool calls, tar import/export, grep: weft CPU per call and per MB"
DURATION = "10s"
BINARIES = ["weft"]

CONFIG = """
[router.providers.mock]
kind = "mock"

# Instant: the measured runs cost weft's work, not a model's.
[router.providers.mock.models.mock-1]

[gateway]
tenant_max_concurrent_runs = 100000

[volumes]
max_volume_bytes = 268435456

[telemetry]
log_level = "warn"
"""


def add_args(p):
    p.add_argument("--runs", type=int, default=60, help="runs per batch (default 60)")
    p.add_argument("--calls", type=int, default=15, help="tool calls per run (default 15)")
    p.add_argument("--workers", type=int, default=8, help="runs in flight (default 8)")
    p.add_argument("--files", type=int, default=1000)
    p.add_argument("--tree-mb", type=int, default=20)
    p.add_argument("--grep-mb", type=int, default=10)
    p.add_argument("--greps", type=int, default=10)


def _raw(fleet, method, path, data=None, ctype=None):
    req = urllib.request.Request(fleet.url.rstrip("/") + path, data=data, method=method)
    req.add_header("authorization", f"Bearer {fleet.token}")
    if ctype:
        req.add_header("content-type", ctype)
    try:
        with urllib.request.urlopen(req, timeout=300) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        raise BenchError(f"{method} {path} answered {e.code}: {e.read()[:500]!r}") from e


def _script(calls, tool, path):
    turns = []
    for i in range(calls):
        if tool == "Context":
            turns.append([{"name": "Context", "input": {"op": "time"}}])
        elif i == 0:
            turns.append([{"name": "Write", "input": {"path": path, "content": "line 0\n"}}])
        elif i % 3 == 1:
            turns.append([{"name": "Edit", "input": {"path": path, "edits": [
                {"old": f"line {i - 1}\n", "new": f"line {i}\n"}]}}])
        elif i % 3 == 2:
            turns.append([{"name": "Read", "input": {"path": path}}])
        else:
            turns.append([{"name": "Write", "input": {"path": path, "content": f"line {i - 1}\n"}}])
    return "#mock " + json.dumps({"turns": turns, "reply": "done"})


def _batch(s, fleet, agent, tool, runs, calls, workers, tag):
    """`runs` runs of `agent`, `workers` at a time; returns (wall s, failures)."""
    todo = list(range(runs))
    lock = threading.Lock()
    failures = []

    def worker():
        while True:
            with lock:
                if not todo:
                    return
                i = todo.pop()
            body = {"agent": agent, "input": _script(calls, tool, f"{tag}/f{i}.txt")}
            run = s.api(fleet, "POST", "/v1/runs", body)
            while True:
                r = s.api(fleet, "GET", f"/v1/runs/{run['run_id']}")
                if r["status"] in ("succeeded", "failed", "cancelled"):
                    break
                time.sleep(0.02)
            if r["status"] != "succeeded":
                with lock:
                    failures.append(r["status"])

    t0 = time.monotonic()
    threads = [threading.Thread(target=worker) for _ in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.monotonic() - t0, failures


def _tree(files, total_mb):
    size = total_mb * 1024 * 1024 // files
    line = b"fn handler(request: Request) -> Response { respond(request.body()) }\n"
    body = (line * (size // len(line) + 1))[:size]
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as t:
        for i in range(files):
            data = body[:-8] + f"{i:07d}\n".encode()
            info = tarfile.TarInfo(f"src/m{i // 100:02d}/f{i:04d}.rs")
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def run(s):
    a = s.args
    fleet = s.fleet(CONFIG)
    pids = s.server_pids(fleet)
    log(f"weft at {fleet.url} (pids {pids})")
    s.api(fleet, "POST", "/v1/volumes", {"name": "bench"})
    s.api(fleet, "PUT", "/v1/agents/files", {"model": "mock-1", "tools": ["Write", "Edit", "Read"],
                                             "max_iterations": a.calls + 2,
                                             "volumes": [{"name": "bench", "mode": "rw"}]})
    s.api(fleet, "PUT", "/v1/agents/ctx", {"model": "mock-1", "tools": ["Context"],
                                           "max_iterations": a.calls + 2})
    # Warm both paths (connections, caches).
    _batch(s, fleet, "files", "Write", a.workers, a.calls, a.workers, "warm")
    _batch(s, fleet, "ctx", "Context", a.workers, a.calls, a.workers, "warm")

    rows, figures = [], {}
    per = {}
    for agent, tool in (("ctx", "Context"), ("files", "Write")):
        w0, p0 = cpu_ms(pids), cpu_ms(postgres_pids())
        wall, failures = _batch(s, fleet, agent, tool, a.runs, a.calls, a.workers, "m")
        w, p = cpu_ms(pids) - w0, cpu_ms(postgres_pids()) - p0
        calls = a.runs * a.calls
        per[tool] = (w * 1000 / calls, p * 1000 / calls)
        rows.append([f"runs with {tool if tool == 'Context' else 'Write/Edit/Read'}", a.runs, calls,
                     round(a.runs / wall, 1), round(w * 1000 / calls), round(p * 1000 / calls),
                     len(failures)])
    tool_us = per["Write"][0] - per["Context"][0]
    pg_us = per["Write"][1] - per["Context"][1]
    figures.update({"file tool weft CPU µs/call (over Context)": round(tool_us),
                    "file tool Postgres CPU µs/call (over Context)": round(pg_us)})

    log(f"import/export: {a.files} files, {a.tree_mb} MB")
    tar = _tree(a.files, a.tree_mb)
    s.api(fleet, "POST", "/v1/volumes", {"name": "tree"})
    w0, p0, t0 = cpu_ms(pids), cpu_ms(postgres_pids()), time.monotonic()
    _raw(fleet, "POST", "/v1/volumes/tree/import", tar, "application/x-tar")
    imp = (time.monotonic() - t0, cpu_ms(pids) - w0, cpu_ms(postgres_pids()) - p0)
    w0, p0, t0 = cpu_ms(pids), cpu_ms(postgres_pids()), time.monotonic()
    _, out = _raw(fleet, "GET", "/v1/volumes/tree/export")
    exp = (time.monotonic() - t0, cpu_ms(pids) - w0, cpu_ms(postgres_pids()) - p0)
    with tarfile.open(fileobj=io.BytesIO(tar)) as t_in, tarfile.open(fileobj=io.BytesIO(out)) as t_out:
        a_in = {m.name: t_in.extractfile(m).read() for m in t_in.getmembers()}
        a_out = {m.name: t_out.extractfile(m).read() for m in t_out.getmembers() if m.isfile()}
    if a_in != a_out:
        raise BenchError("the export differs from the import")
    figures.update({"import s": round(imp[0], 2), "import weft CPU ms": round(imp[1]),
                    "export s": round(exp[0], 2), "export weft CPU ms": round(exp[1])})

    log(f"grep over {a.grep_mb} MB")
    g = _tree(500, a.grep_mb)
    s.api(fleet, "POST", "/v1/volumes", {"name": "grep"})
    _raw(fleet, "POST", "/v1/volumes/grep/import", g, "application/x-tar")
    s.api(fleet, "PUT", "/v1/agents/grepper", {"model": "mock-1", "tools": ["Grep"],
                                               "max_iterations": a.greps + 2,
                                               "volumes": [{"name": "grep", "mode": "ro"}]})
    script = {"turns": [[{"name": "Grep", "input": {"pattern": "^0000[0-9]{3}$", "mode": "content"}}]
                        for _ in range(a.greps)], "reply": "done"}
    s.api(fleet, "PUT", "/v1/agents/grep0", {"model": "mock-1", "tools": ["Context"], "max_iterations": a.greps + 2})
    base_script = {"turns": [[{"name": "Context", "input": {"op": "time"}}] for _ in range(a.greps)], "reply": "done"}
    costs = {}
    for agent, sc in (("grep0", base_script), ("grepper", script)):
        w0, p0, t0 = cpu_ms(pids), cpu_ms(postgres_pids()), time.monotonic()
        run = s.api(fleet, "POST", "/v1/runs", {"agent": agent, "input": "#mock " + json.dumps(sc)})
        while s.api(fleet, "GET", f"/v1/runs/{run['run_id']}")["status"] not in ("succeeded", "failed"):
            time.sleep(0.02)
        costs[agent] = (time.monotonic() - t0, cpu_ms(pids) - w0, cpu_ms(postgres_pids()) - p0)
    grep_ms = (costs["grepper"][0] - costs["grep0"][0]) * 1000 / a.greps
    grep_cpu = (costs["grepper"][1] - costs["grep0"][1]) / a.greps
    figures.update({"grep wall ms": round(grep_ms), "grep weft CPU ms": round(grep_cpu)})

    m = s.machine
    md = "\n".join([
        f"## weft volumes benchmark, {m['date']}", "",
        f"{m['cpu']}, {m['cores']} cores, git {m['git']}; `weft up` (one process), Postgres on "
        f"the same machine, blobs in Postgres; hypervisor steal {m['cpu_steal_pct']}%", "",
        f"File tool calls: {a.runs} runs × {a.calls} calls, {a.workers} in flight, instant mock "
        f"model; CPU per tool call over the batch (µs).", "",
        table(["batch", "runs", "calls", "runs/s", "weft CPU µs/call", "Postgres CPU µs/call",
               "failed"], rows, ["l", "r", "r", "r", "r", "r", "r"]), "",
        f"A file tool call (Write/Edit/Read in turn) costs weft **{round(tool_us)} µs** of CPU "
        f"more than a `Context` call, Postgres {round(pg_us)} µs more.", "",
        table(["operation", "wall s", "weft CPU ms", "Postgres CPU ms"], [
            [f"import {a.files} files, {a.tree_mb} MB tar", round(imp[0], 2), round(imp[1]), round(imp[2])],
            [f"export {a.files} files, {a.tree_mb} MB tar", round(exp[0], 2), round(exp[1]), round(exp[2])],
            [f"Grep over {a.grep_mb} MB (500 files), per call", round(grep_ms / 1000, 3), round(grep_cpu),
             round((costs['grepper'][2] - costs['grep0'][2]) / a.greps)],
        ], ["l", "r", "r", "r"]),
    ])
    return md + "\n", figures
