"""`plans`: what a plan run's orchestration costs per task, the model left out.

Two stretches on an instant mock model, each after a warm-up of its own:

- **plain runs**: runs of the agent `worker` doing what one task attempt does — one `Write` of
  a file of the named volume `ws`, then a reply — `--plain-concurrency` at a time (default: as
  many as the plan runs' task attempts in flight, `--concurrency` × min(`--tasks`, 16));
- **plan runs**: plan runs of the agent `lead` (`mode: "plan"`) with `--tasks` (K) independent
  tasks given by the caller (no planner is asked), each task's attempt a sub-run of `worker`
  doing that same work, verified by checks only (`exists` and `non_empty` on the file it
  wrote; no verifier is asked), `--concurrency` plan runs at a time.

Each stretch counts what weft and its infrastructure spent over exactly the runs it started (it
starts none after `--duration` and waits for those under way), divided by those runs: weft's
CPU, Postgres's, SQL statements, commits, NATS messages, Redis commands, weft's system calls and
context switches, and with --callgrind its instructions. A task's share is a plan run's
figure / K, and the orchestration per task is (plan run − K × plain run) / K: what the plan
harness adds around the sub-run (its events and rows, the checks, the batching) over running
that sub-run alone.
"""

import http.client
import json
import threading
import time
import urllib.parse

from ..common import (BenchError, Meter, callgrind_bin, cell, cpu_ms, get, log, mock_config, postgres_pids, rnd,
                      seconds, table)

HELP = "plan runs of K checked tasks against plain runs of the same work: orchestration cost per task"
DURATION = "20s"
BINARIES = ["weft"]

VOLUME = "ws"
# The most task attempts of one plan run in flight (`limits.max_parallel`'s range).
MAX_PARALLEL = 16
# The counters a stretch reports, in the order of the summary's columns.
COSTS = ["weft_cpu_ms", "postgres_cpu_ms", "nats_cpu_ms", "redis_cpu_ms", "sql_statements", "commits",
         "nats_messages", "redis_commands", "weft_syscalls", "weft_context_switches", "weft_instructions"]
COST_NAMES = ["weft CPU ms", "Postgres CPU ms (all databases)", "NATS CPU ms", "Redis CPU ms",
              "SQL statements", "commits", "NATS messages", "Redis commands", "weft system calls",
              "weft context switches", "weft instructions"]


def add_args(p):
    p.add_argument("--tasks", type=int, default=4, help="tasks per plan run, K (1-100; default 4)")
    p.add_argument("--concurrency", type=int, default=4, help="plan runs at once (default 4)")
    p.add_argument("--plain-concurrency", type=int, default=0,
                   help="plain runs at once (default 0: as many as the plan runs' task attempts "
                        "in flight, concurrency x min(tasks, 16))")
    p.add_argument("--timeout", type=seconds, default=120,
                   help="longest wait for one run to finish, in seconds (default 120)")
    p.add_argument("--callgrind", action="store_true",
                   help="weft under valgrind's callgrind: instructions per plain run, plan run and "
                        "task (15-50x slower)")


def config():
    # Instant: the measured runs cost weft's work, not a model's.
    return mock_config("""
[router.providers.mock.models.mock-1]

[gateway]
tenant_max_concurrent_runs = 100000
max_streams_per_principal = 100000
""")


# --- one run ------------------------------------------------------------------------------------

class RunFailed(Exception):
    """A run that did not end as it must; the message says how, with weft's words."""


class Client:
    """One keep-alive HTTP/1.1 connection to weft, for one worker thread: `POST /v1/runs` with
    `stream: true` (one request per run: created, then its events until `run_finished`)."""

    def __init__(self, url, token, timeout):
        u = urllib.parse.urlsplit(url)
        self.host, self.port, self.token, self.timeout = u.hostname, u.port or 80, token, timeout
        self.conn = None

    def close(self):
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def run(self, body):
        """Starts a run and reads its stream to the end: (run id, [(event, data)]). Raises
        RunFailed when weft refuses it or the stream ends before `run_finished`."""
        if self.conn is None:
            self.conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        try:
            self.conn.request("POST", "/v1/runs", json.dumps(dict(body, stream=True)),
                              {"authorization": f"Bearer {self.token}", "content-type": "application/json",
                               "accept": "text/event-stream"})
            resp = self.conn.getresponse()
            if resp.status != 200 or "text/event-stream" not in (resp.getheader("content-type") or ""):
                text = resp.read().decode(errors="replace")
                self.close()
                raise RunFailed(f"POST /v1/runs answered {resp.status}: {text[:500]}")
            run_id = resp.getheader("x-weft-run-id")
            frames, event, data = [], None, []
            while True:
                line = resp.readline()
                if not line:
                    break
                line = line.decode().rstrip("\r\n")
                if line.startswith("event:"):
                    event = line[6:].strip()
                elif line.startswith("data:"):
                    data.append(line[5:].removeprefix(" "))
                elif line == "" and data:
                    frames.append((event or "message", json.loads("\n".join(data))))
                    event, data = None, []
            resp.read()
        except (OSError, http.client.HTTPException, ValueError) as e:
            self.close()
            raise RunFailed(f"the run stream broke: {e!r}") from e
        if not frames or frames[-1][0] != "run_finished":
            last = frames[-1] if frames else None
            raise RunFailed(f"run {run_id}: the stream ended before run_finished (last frame: {last})")
        return run_id, frames


def status_of(frames):
    return get(frames[-1][1], "data.status")


def write_script(path, content):
    """The `#mock` line of one task attempt's work: one turn writing `path`, then a reply."""
    turns = [[{"name": "Write", "input": {"path": path, "content": content}}]]
    return "#mock " + json.dumps({"turns": turns, "reply": "done"})


def plain_body(path, content):
    return {"agent": "worker", "input": f"Write {path}.\n{write_script(path, content)}"}


def plain_check(run_id, frames, k):
    """A plain run succeeded with its one Write done."""
    status = status_of(frames)
    if status != "succeeded":
        raise RunFailed(f"plain run {run_id} ended {status}: {frames[-1][1]}")
    results = [d.get("data", {}) for e, d in frames if e == "tool_result"]
    if len(results) != 1 or results[0].get("is_error"):
        raise RunFailed(f"plain run {run_id}: expected one successful Write, got {results} "
                        f"(does the agent `worker` have Write and the volume `{VOLUME}` bound rw?)")


def plan_body(paths, content, k):
    tasks = [{"id": f"t{i}", "description": f"Write {p}.\n{write_script(p, content)}", "agent": "worker",
              "writes": [p], "verify": "checks",
              "checks": [{"check": "exists", "path": p}, {"check": "non_empty", "path": p}]}
             for i, p in enumerate(paths)]
    return {"agent": "lead", "mode": "plan", "input": "Write the files.",
            "plan": {"tasks": tasks, "volume": VOLUME,
                     "limits": {"max_tasks": k, "max_parallel": min(k, MAX_PARALLEL)}}}


def verdicts(verified):
    """`task attempt: tier verdict reason_code [issues]` of each `task_verified`, for a failure's
    message."""
    out = []
    for v in verified:
        issues = "; ".join(i.get("message", "") for i in get(v, "verdict.issues", []))
        out.append(f"{v.get('task')} {v.get('attempt')}: {v.get('tier')} {get(v, 'verdict.verdict')} "
                   f"{get(v, 'verdict.reason_code')}" + (f" ({issues})" if issues else ""))
    return ", ".join(out) or "none"


def plan_check(run_id, frames, k):
    """A plan run succeeded with each task passed at its first attempt, on its checks."""
    data = lambda kind: [d.get("data", {}) for e, d in frames if e == kind]
    status = status_of(frames)
    verified = data("task_verified")
    if status != "succeeded":
        raise RunFailed(f"plan run {run_id} ended {status}: {frames[-1][1]}; verdicts: {verdicts(verified)}")
    started = data("task_started")
    passed = [v for v in verified if v.get("tier") == "checks" and get(v, "verdict.verdict") == "pass"]
    if len(started) != k or len(passed) != k or any(t.get("attempt") != 1 for t in started):
        raise RunFailed(f"plan run {run_id}: expected {k} tasks started once and passed on their checks, "
                        f"got {len(started)} attempts; verdicts: {verdicts(verified)}")
    checked = data("task_checked")
    if len(checked) != k or any(len(c.get("results") or []) != 2 for c in checked):
        raise RunFailed(f"plan run {run_id}: expected {k} tasks with 2 check results each, got "
                        f"{[c.get('results') for c in checked]}")


# --- one stretch ---------------------------------------------------------------------------------

def stretch(fleet, kind, workers, k, length, timeout):
    """`workers` closed-loop workers starting runs of `kind` (`plain` or `plan`) for `length`
    seconds, then waiting for those under way. Every run writes files of its worker's own
    (`plain/w<worker>.txt`, `plan/w<worker>-t<task>.txt`; its next run overwrites them, so the
    volume stays small) with content no other run writes, so each run is one volume change per
    file. Returns {runs, wall_s, latencies_us}; the first failed run stops every worker (each
    ends the run it is in) and raises BenchError with what weft said."""
    stop = threading.Event()
    lock = threading.Lock()
    latencies, failures = [], []
    deadline = time.monotonic() + length

    def worker(w):
        client = Client(fleet.url, fleet.token, timeout)
        n = 0
        try:
            while not stop.is_set() and time.monotonic() < deadline:
                n += 1
                content = f"{kind} {w} {n} {time.time_ns()}\n"
                if kind == "plain":
                    body, check = plain_body(f"plain/w{w}.txt", content), plain_check
                else:
                    body, check = plan_body([f"plan/w{w}-t{i}.txt" for i in range(k)], content, k), plan_check
                t0 = time.monotonic()
                run_id, frames = client.run(body)
                us = (time.monotonic() - t0) * 1e6
                check(run_id, frames, k)
                with lock:
                    latencies.append(us)
        except RunFailed as e:
            with lock:
                failures.append(str(e))
            stop.set()
        except Exception as e:  # a broken worker must fail the stretch, not vanish
            with lock:
                failures.append(f"{type(e).__name__}: {e}")
            stop.set()
        finally:
            client.close()

    t0 = time.monotonic()
    threads = [threading.Thread(target=worker, args=(w,), daemon=True) for w in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - t0
    if failures:
        raise BenchError(f"{len(failures)} {kind} run(s) failed; the first: {failures[0]}")
    return {"runs": len(latencies), "wall_s": round(wall, 3), "latencies_us": latencies}


def percentiles(us):
    v = sorted(us)
    at = lambda q: None if not v else round(v[min(len(v) - 1, max(0, int(q * len(v) + 0.5) - 1))])
    return {"p50": at(0.50), "p95": at(0.95), "p99": at(0.99), "max": round(v[-1]) if v else None,
            "mean": round(sum(v) / len(v)) if v else None}


def volume_state(s, fleet):
    v = s.api(fleet, "GET", f"/v1/volumes/{VOLUME}")
    return v["seq"], v["files"]


def measure(s, fleet, meter, kind, workers, k):
    """A warm-up stretch, then the measured one inside the meter; checks the volume took one
    change per file written. Writes `<kind>.json` and returns it."""
    a = s.args
    log(f"{kind} runs, {workers} at a time: {a.warmup} warm-up, then {a.duration}")
    stretch(fleet, kind, workers, k, seconds(a.warmup), a.timeout)
    seq0, _ = volume_state(s, fleet)
    meter.start(kind)
    r = stretch(fleet, kind, workers, k, seconds(a.duration), a.timeout)
    totals = meter.stop()
    seq1, files = volume_state(s, fleet)
    writes = r["runs"] * (k if kind == "plan" else 1)
    if seq1 - seq0 != writes:
        raise BenchError(f"{kind}: {r['runs']} runs should have made {writes} changes of volume `{VOLUME}`, "
                         f"it took {seq1 - seq0}: a Write did not land (see the logs)")
    if not r["runs"]:
        raise BenchError(f"{kind}: no run finished in {a.duration} (raise --duration or --timeout)")
    lat = r.pop("latencies_us")
    per = {key: None if v is None else v / r["runs"] for key, v in totals.items()}
    out = dict(r, kind=kind, workers=workers, tasks=k if kind == "plan" else 1,
               runs_per_s=round(r["runs"] / r["wall_s"], 2), end_to_end_us=percentiles(lat),
               volume_files=files, totals=totals, per_run=per)
    s.write_json(f"{kind}.json", out)
    return out


def run(s):
    a = s.args
    k = a.tasks
    if not 1 <= k <= 100:
        raise BenchError(f"--tasks must be 1-100 (a plan's max_tasks), got {k}")
    if a.concurrency < 1:
        raise BenchError(f"--concurrency must be at least 1, got {a.concurrency}")
    plain_workers = a.plain_concurrency or a.concurrency * min(k, MAX_PARALLEL)
    fleet = s.fleet(config(), bin_dir=callgrind_bin(s) if a.callgrind else None)
    pid = s.server_pids(fleet)[0]
    log(f"weft at {fleet.url} (pid {pid})")
    meter = Meter(s, fleet, pid, callgrind=a.callgrind)
    s.api(fleet, "POST", "/v1/volumes", {"name": VOLUME})
    bind = [{"name": VOLUME, "mode": "rw", "default": True}]
    # The plan run's own agent binds the volume too: a sub-run's bindings are its agent's
    # narrowed by its parent's.
    for name in ("worker", "lead"):
        s.api(fleet, "PUT", f"/v1/agents/{name}", {"model": "mock-1", "tools": ["Write"], "volumes": bind})

    # weft's own background work, for scale: its CPU over a few idle seconds.
    idle_s = 3
    w0, p0 = cpu_ms([pid]), cpu_ms(postgres_pids())
    time.sleep(idle_s)
    idle = {"weft_cpu_ms_per_s": round((cpu_ms([pid]) - w0) / idle_s, 2),
            "postgres_cpu_ms_per_s": round((cpu_ms(postgres_pids()) - p0) / idle_s, 2)}
    s.write_json("idle.json", idle)

    # Each stretch waits for its own runs to finish and its statistics to land (Meter.stop).
    plain = measure(s, fleet, meter, "plain", plain_workers, k)
    plan = measure(s, fleet, meter, "plan", a.concurrency, k)
    meter.write_statements(s.out / "statements.txt")
    return summarise(s, k, plain, plan, idle)


# --- the summary ---------------------------------------------------------------------------------

def derived(k, plain, plan):
    """Per key of COSTS: per plain run, per plan run, per task, orchestration per task, task /
    plain run."""
    out = {}
    for key in COSTS:
        x, y = plain["per_run"].get(key), plan["per_run"].get(key)
        task = None if y is None else y / k
        orch = None if x is None or y is None else (y - k * x) / k
        ratio = None if task is None or not x else task / x
        out[key] = {"plain_run": x, "plan_run": y, "task": task, "orchestration_per_task": orch,
                    "task_over_plain_run": ratio}
    return out


def fmt(key, v):
    if v is None:
        return None
    if key in ("weft_instructions", "weft_syscalls", "weft_context_switches"):
        return round(v)
    return rnd(v, 2)


def summarise(s, k, plain, plan, idle):
    a = s.args
    m = s.machine
    d = derived(k, plain, plan)
    s.write_json("derived.json", d)
    lat = lambda r, q: None if get(r, f"end_to_end_us.{q}") is None else rnd(r["end_to_end_us"][q] / 1000, 2)
    rows = [[f"plain run ({plain['workers']} at a time)", plain["runs"], plain["runs_per_s"], plain["runs_per_s"],
             *[lat(plain, q) for q in ("p50", "p95", "p99", "max")]],
            [f"plan run of {k} tasks ({plan['workers']} at a time)", plan["runs"], plan["runs_per_s"],
             rnd(plan["runs_per_s"] * k, 2), *[lat(plan, q) for q in ("p50", "p95", "p99", "max")]]]
    cost_rows = []
    for label, field, digits in (("per plain run", "plain_run", None), ("per plan run", "plan_run", None),
                                 (f"per task (plan run / {k})", "task", None),
                                 (f"orchestration per task ((plan run − {k} × plain run) / {k})",
                                  "orchestration_per_task", None),
                                 ("task / plain run", "task_over_plain_run", 3)):
        cost_rows.append([label] + [rnd(d[key][field], digits) if digits else fmt(key, d[key][field])
                                    for key in COSTS])
    cpu = d["weft_cpu_ms"]
    md = [f"## weft plans benchmark, {m['date']}", "",
          f"{m['cpu']}, {m['cores']} cores, git {m['git']}; `weft up` (one process) with an instant "
          f"mock model; the generator is `loadtest/bench.py` itself (Python, one thread per run in "
          f"flight); {a.duration} per stretch after {a.warmup} warm-up; hypervisor steal "
          f"{m['cpu_steal_pct']}% of CPU time over the sitting", "",
          f"A plain run: the agent `worker` writes one file of the volume `{VOLUME}` (one `Write` "
          f"turn, then a reply). A plan run: {k} independent tasks given by the caller, each a "
          f"sub-run of `worker` doing that same work, verified by its checks only (`exists`, "
          f"`non_empty`), up to {min(k, MAX_PARALLEL)} at once. Every run is started with "
          f"`POST /v1/runs` (`stream: true`) and read to `run_finished`; latencies in ms, POST "
          f"sent → `run_finished` read.", "",
          table(["", "runs", "runs/s", "tasks/s", "end-to-end p50", "p95", "p99", "max"], rows,
                ["l"] + ["r"] * 7), "",
          "What weft and its infrastructure spent over each stretch, divided by the runs it started "
          "(all of them finished):", "",
          table([""] + COST_NAMES, cost_rows, ["l"] + ["r"] * len(COSTS)), "",
          f"A task costs weft **{cell(fmt('weft_cpu_ms', cpu['task']))} ms** of CPU against "
          f"{cell(fmt('weft_cpu_ms', cpu['plain_run']))} ms for a plain run doing the same work "
          f"(×{cell(rnd(cpu['task_over_plain_run'], 3))}): the plan harness adds "
          f"**{cell(fmt('weft_cpu_ms', cpu['orchestration_per_task']))} ms** per task. A plain run's "
          f"figures include its HTTP request, which a task's sub-run does not make; so the "
          f"orchestration per task is, if anything, understated by that much. weft idle: "
          f"{idle['weft_cpu_ms_per_s']} ms of CPU per second (Postgres {idle['postgres_cpu_ms_per_s']}), "
          f"included in each stretch."]
    if a.callgrind:
        md += ["", "Under callgrind (--callgrind): the rates, latencies and CPU times above are "
               "valgrind's (15-50x slower), and so are the system calls and context switches; the "
               "instructions are what to compare."]
    figures = {"plain runs/s": plain["runs_per_s"], "plan runs/s": plan["runs_per_s"],
               "plain end-to-end p50 µs": get(plain, "end_to_end_us.p50"),
               "plan end-to-end p50 µs": get(plan, "end_to_end_us.p50"),
               "plan end-to-end p95 µs": get(plan, "end_to_end_us.p95")}
    for key, name in (("weft_cpu_ms", "weft CPU ms"), ("postgres_cpu_ms", "Postgres CPU ms"),
                      ("sql_statements", "SQL statements"), ("commits", "commits"),
                      ("nats_messages", "NATS messages"), ("redis_commands", "Redis commands"),
                      ("weft_instructions", "weft instructions")):
        figures.update({f"{name}/plain run": fmt(key, d[key]["plain_run"]),
                        f"{name}/plan run": fmt(key, d[key]["plan_run"]),
                        f"{name}/task": fmt(key, d[key]["task"]),
                        f"orchestration {name}/task": fmt(key, d[key]["orchestration_per_task"])})
    figures["weft CPU task/plain run"] = rnd(cpu["task_over_plain_run"], 3)
    return "\n".join(md) + "\n", figures
