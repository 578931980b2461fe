#!/usr/bin/env python3
"""tests/harness_b/run.py — Suite B: the frozen task set in four arms against a weft fleet.

For each task and arm: a fresh named volume seeded with the task's files, agents made for it
(a worker with Read/Write/Edit/List bound `rw` to the volume; for plan runs a planner with no
tools, used as replanner; for `plan_llm` a verifier bound `ro` with Read/List), then:

    loop         one run of the worker: the goal
    loop_checks  one run of the worker: the goal and its public checks (as the plan attempt's
                 prompt words them); then this client runs the checks itself (tasks.run_check, a
                 mirror of weft's) and, when one fails, makes ONE follow-up run of the worker
                 with the failures and the goal. weft has no "run the checks" tool: this is the
                 emulation, and the only feedback a loop gets.
    plan_checks  `mode: plan` with `plan.tasks` = one caller task (the goal, its public checks,
                 `verify: checks`, critical); no planner is asked
    plan_llm     the same with `verify: llm` and `plan.verifier`

Then the final files (GET /v1/volumes/{v}/export) go through the task's hidden grader; passed =
the grader passes on the final files, whatever the run reported. For plan runs, each attempt's
files are exported the moment its `task_checked` event arrives on the live stream (the attempt's
sub-run has ended; the verifier, read-only, runs next), graded, and marked `exact` unless the
volume's changelog shows a later attempt wrote before that export (then the final files stand
in, marked `final`). Tokens: every run of the tree (the run's own usage plus each sub-run's, found
through the events and GET /v1/runs filtered on root_run_id).

Usage:
    run.py --url http://127.0.0.1:PORT --token wft_... [--model real-openai]
           [--arms all|loop,loop_checks,plan_checks,plan_llm] [--tasks N] [--only ID,ID]
           [--out results.json] [--fresh] [--jobs N]
URL and token default to WEFT_URL (or WEFT_BASE_URL) and WEFT_TOKEN, as the fleets of
tests/harness/fleet.py give them. The output is rewritten after each (task, arm), and a rerun
with the same --out skips the pairs already done (not those that ended in a harness error).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import secrets
import sys
import tarfile
import threading
import time
from datetime import datetime
from pathlib import Path
from urllib.parse import quote, urlparse

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tasks as T  # noqa: E402

ARM_NAMES = ["loop", "loop_checks", "plan_checks", "plan_llm"]
ARM_SHORT = {"loop": "l", "loop_checks": "lc", "plan_checks": "pc", "plan_llm": "pl"}
# Events whose data name sub-runs of a plan run.
CHILD_FIELDS = {"task_started": ["child_run_id"], "plan_proposed": ["child_run_id"],
                "plan_rejected": ["child_run_id"], "verifier_unreadable": ["verifier_run_id"],
                "task_verified": ["verifier_run_ids"]}


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


class HarnessError(Exception):
    """weft answered something this harness cannot go on from (recorded as `error`)."""


class Weft:
    """The few weft routes the suite uses, over /v1 with a bearer token."""

    def __init__(self, url: str, token: str, timeout: float = 60.0):
        base = url.rstrip("/").removesuffix("/v1")
        host = urlparse(base).hostname or ""
        self.http = httpx.Client(base_url=base + "/v1/",
                                 headers={"Authorization": f"Bearer {token}"}, timeout=timeout,
                                 trust_env=host not in ("127.0.0.1", "localhost", "::1"))

    def req(self, method: str, path: str, ok=(200, 201, 202), **kw) -> httpx.Response:
        r = self.http.request(method, path, **kw)
        if r.status_code not in ok:
            raise HarnessError(f"{method} /v1/{path}: {r.status_code} {r.text[:600]}")
        return r

    def get(self, path: str, **kw) -> dict:
        return self.req("GET", path, **kw).json()

    # --- runs -----------------------------------------------------------------------------------

    def events(self, run_id: str) -> list[dict]:
        out, cursor = [], None
        while True:
            params = {"limit": 1000}
            if cursor is not None:
                params["from_seq"] = cursor
            page = self.get(f"runs/{run_id}/events", params=params)
            out += page.get("data") or page.get("events") or []
            cursor = page.get("next_cursor")
            if cursor is None or not page.get("data"):
                return out

    def follow(self, run_id: str, deadline_s: float, on_event=None) -> bool:
        """Reads the run's stream until run_finished (reconnecting after `from_seq`); at
        `deadline_s` the run is cancelled. True when run_finished was seen."""
        timer = threading.Timer(deadline_s, self._cancel, args=(run_id,))
        timer.daemon = True
        timer.start()
        hard = time.monotonic() + deadline_s + 180
        last = 0
        try:
            while time.monotonic() < hard:
                try:
                    with self.http.stream("GET", f"runs/{run_id}/stream",
                                          params={"from_seq": last + 1},
                                          headers={"Accept": "text/event-stream"},
                                          timeout=httpx.Timeout(30.0, read=300.0)) as s:
                        if s.status_code != 200:
                            raise HarnessError(f"stream of {run_id}: {s.status_code}")
                        for line in s.iter_lines():
                            if not line.startswith("data:"):
                                continue
                            try:
                                ev = json.loads(line[5:].strip())
                            except ValueError:
                                continue
                            if not isinstance(ev, dict) or "kind" not in ev:
                                continue
                            if isinstance(ev.get("seq"), int):
                                last = max(last, ev["seq"])
                            if on_event:
                                on_event(ev)
                            if ev["kind"] == "run_finished":
                                return True
                except (httpx.TransportError, httpx.StreamError) as e:
                    say(f"  stream of {run_id} broke ({type(e).__name__}); reconnecting")
                    time.sleep(2)
                # The stream ended without run_finished: ask the run itself.
                if self.get(f"runs/{run_id}")["status"] in ("succeeded", "failed", "cancelled"):
                    return True
            return False
        finally:
            timer.cancel()

    def _cancel(self, run_id: str) -> None:
        say(f"  run {run_id} is past its time budget: cancelling it")
        try:
            self.req("POST", f"runs/{run_id}/cancel", ok=(200, 202, 404, 409),
                     json={"reason": "tests/harness_b: past the frozen time budget"})
        except (httpx.HTTPError, HarnessError) as e:
            say(f"  cancel failed: {e}")

    def tree(self, root: dict, events: list[dict]) -> list[dict]:
        """Every run of `root`'s tree other than root: the sub-runs its events name, plus those
        GET /v1/runs lists with root_run_id = root (newest first, since the root's creation)."""
        ids = set()
        for e in events:
            for field in CHILD_FIELDS.get(e["kind"], []):
                v = (e.get("data") or {}).get(field)
                ids.update(v if isinstance(v, list) else [v] if v else [])
        cursor = None
        for _ in range(50):
            params = {"limit": 500, "since": root["created_at"]}
            if cursor:
                params["cursor"] = cursor
            page = self.get("runs", params=params)
            for r in page.get("data", []):
                if r.get("root_run_id") == root["run_id"]:
                    ids.add(r["run_id"])
            cursor = page.get("next_cursor")
            if not cursor:
                break
        ids.discard(root["run_id"])
        return [self.get(f"runs/{i}") for i in sorted(ids)]

    # --- volumes --------------------------------------------------------------------------------

    def export(self, volume: str) -> dict:
        """The volume's files at one seq: {"seq", "tree_hash", "files": {path: bytes}}."""
        for _ in range(5):
            before = self.get(f"volumes/{volume}")
            r = self.req("GET", f"volumes/{volume}/export", ok=(200, 409))
            after = self.get(f"volumes/{volume}")
            if r.status_code == 200 and before["seq"] == after["seq"]:
                return {"seq": before["seq"], "tree_hash": before["tree_hash"],
                        "files": untar(r.content)}
            time.sleep(0.5)
        raise HarnessError(f"volume {volume} kept changing while it was exported")

    def changes(self, volume: str) -> list[dict]:
        out, before = [], None
        for _ in range(100):
            params = {"limit": 100}
            if before is not None:
                params["before_seq"] = before
            page = self.get(f"volumes/{volume}/changes", params=params)
            out += page.get("data", [])
            before = page.get("next_before_seq")
            if before is None:
                break
        return out


def untar(data: bytes) -> dict:
    files = {}
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        for m in tar.getmembers():
            if m.isfile():
                f = tar.extractfile(m)
                files[m.name.removeprefix("./")] = f.read() if f else b""
    return files


def usage_tokens(run: dict) -> int:
    """As the executor counts a sub-run's tokens: total_tokens, else prompt + completion."""
    u = run.get("usage") or {}
    n = lambda k: int(u.get(k) or 0)  # noqa: E731
    return n("total_tokens") or n("prompt_tokens") + n("completion_tokens")


def ts(s: str | None) -> float | None:
    if not s:
        return None
    return datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()


# --- one task in one arm --------------------------------------------------------------------------


class Case:
    """One (task, arm): its volume, its agents, its runs, and the record they make."""

    def __init__(self, w: Weft, frozen: dict, tag: str, task: dict, arm: str, model: str):
        self.w, self.frozen, self.task, self.arm, self.model = w, frozen, task, arm, model
        self.spec = frozen["arms"][arm]
        self.budgets = frozen["budgets"]
        self.prompts = frozen["prompts"]
        self.volume = f"hb{tag}-{ARM_SHORT[arm]}-{task['id']}"
        self.worker = f"{self.volume}-worker"
        self.verifier = f"{self.volume}-verifier"
        self.planner = f"{self.volume}-planner"
        self.record = {"task": task["id"], "family": task["family"], "arm": arm,
                       "volume": self.volume, "runs": [], "attempts": [], "error": None}

    def agent(self, name: str, tools: list, prompt: str, iterations: int, volume_mode=None):
        body = {"model": self.model, "tools": tools, "system_prompt": prompt,
                "max_iterations": iterations,
                "max_tokens": self.budgets["model_call_max_tokens"],
                "sampling": {"temperature": self.budgets["temperature"]}}
        if volume_mode:
            body["volumes"] = [{"name": self.volume, "mode": volume_mode, "default": True}]
        self.w.req("PUT", f"agents/{name}", json=body)

    def setup(self) -> None:
        self.w.req("POST", "volumes", json={"name": self.volume})
        for path, text in self.task["seed_files"].items():
            self.w.req("PUT", f"volumes/{self.volume}/files/{quote(path)}", content=text.encode(),
                       headers={"Content-Type": "application/octet-stream"})
        self.agent(self.worker, self.frozen["worker_tools"], self.prompts["worker"],
                   self.budgets["worker_max_iterations"], "rw")
        if self.spec["mode"] == "plan":
            self.agent(self.planner, [], self.prompts["planner"],
                       self.budgets["planner_max_iterations"])
        if self.spec.get("verify") == "llm":
            self.agent(self.verifier, self.frozen["verifier_tools"], self.prompts["verifier"],
                       self.budgets["verifier_max_iterations"], "ro")

    def start(self, body: dict, deadline_s: float, on_event=None) -> tuple[dict, list, float]:
        t0 = time.monotonic()
        run = self.w.req("POST", "runs", json=body).json()
        run_id = run["run_id"]
        say(f"  run {run_id} ({body.get('mode', 'loop')})")
        finished = self.w.follow(run_id, deadline_s, on_event)
        wall = time.monotonic() - t0
        run = self.w.get(f"runs/{run_id}")
        events = self.w.events(run_id)
        subs = self.w.tree(run, events)
        own = usage_tokens(run)
        children = sum(usage_tokens(s) for s in subs)
        by_agent: dict[str, int] = {}
        for s in [run, *subs]:
            role = self.role_of(s["agent"])
            by_agent[role] = by_agent.get(role, 0) + usage_tokens(s)
        # A parent whose usage already rolls its sub-runs up is not counted twice.
        total = children if subs and own == children else own + children
        self.record["runs"].append({
            "run_id": run_id, "status": run["status"], "stop_reason": run.get("stop_reason"),
            "finished_seen": finished, "wall_s": round(wall, 2),
            "server_s": (round(ts(run.get("finished_at")) - ts(run.get("created_at")), 2)
                         if run.get("finished_at") else None),
            "tokens": total, "tokens_own": own, "tokens_subruns": children,
            "tokens_by_role": by_agent, "subruns": len(subs), "iterations": run.get("iterations"),
            "error": run.get("error")})
        return run, events, wall

    def role_of(self, agent: str) -> str:
        return {self.worker: "worker", self.verifier: "verifier",
                self.planner: "planner"}.get(agent, agent)

    # --- the arms ---------------------------------------------------------------------------

    def run_loop(self) -> dict:
        checks_in_goal = self.spec["checks_in_goal"]
        text = T.goal_with_checks(self.task) if checks_in_goal else self.task["goal"]
        deadline = self.budgets["loop_run_timeout_s"]
        for attempt in range(1, 2 + self.spec["followups"]):
            run, _events, _wall = self.start({"agent": self.worker, "input": text}, deadline)
            snap = self.w.export(self.volume)
            passed, why = T.grade(self.task, snap["files"])
            results = T.run_checks(self.task["checks"], snap["files"])
            failures = [r["message"] for r in results if not r["passed"]]
            self.record["attempts"].append({
                "attempt": attempt, "child_run_id": run["run_id"], "run_status": run["status"],
                "checks_passed": not failures, "checks_by": "client", "grader_passed": passed,
                "grader_why": why, "files": "exact", "verdict": None})
            if not failures or not checks_in_goal:
                break
            text = T.followup_text(self.task, failures)
        return snap

    def run_plan(self) -> dict:
        task = self.task
        plan_task = {"id": task["id"], "description": task["goal"], "writes": task["outputs"],
                     "checks": task["checks"], "acceptance": self.prompts["acceptance"],
                     "verify": self.spec["verify"],
                     "critical": self.budgets["plan_task_critical"]}
        plan = {"planner": self.planner, "replanner": self.planner, "tasks": [plan_task],
                "approval": "none", "volume": self.volume, "limits": self.budgets["plan_limits"]}
        if self.spec["verify"] == "llm":
            plan["verifier"] = self.verifier
        snaps: dict[tuple, dict] = {}

        def on_event(ev):
            # The attempt's sub-run ended and its checks ran: these are the files its verdict
            # (checks, then the read-only verifier) is about.
            if ev["kind"] == "task_checked":
                d = ev.get("data") or {}
                try:
                    snaps[(d.get("task"), d.get("attempt"), ev.get("seq"))] = \
                        self.w.export(self.volume)
                except (httpx.HTTPError, HarnessError) as e:
                    say(f"  could not export the volume at task_checked: {e}")

        deadline = self.budgets["plan_limits"]["max_wall_s"] + self.budgets["plan_run_grace_s"]
        run, events, _wall = self.start({"agent": self.worker, "mode": "plan",
                                         "input": task["goal"], "plan": plan},
                                        deadline, on_event)
        final = self.w.export(self.volume)
        changes = self.w.changes(self.volume)
        first_change = {}
        for c in changes:
            if c.get("run_id"):
                first_change[c["run_id"]] = min(c["seq"], first_change.get(c["run_id"], c["seq"]))
        started = [(e["seq"], e["data"]) for e in events if e["kind"] == "task_started"]
        verdicts = [e for e in events if e["kind"] == "task_verified"]
        # An attempt number restarts after a replan: key attempts by the task_checked's seq.
        for e in events:
            if e["kind"] != "task_checked":
                continue
            d = e["data"]
            child = next((s["child_run_id"] for q, s in reversed(started)
                          if q < e["seq"] and s["task"] == d["task"]
                          and s["attempt"] == d["attempt"]), None)
            later = [s["child_run_id"] for q, s in started if q > e["seq"]]
            snap = snaps.get((d["task"], d["attempt"], e["seq"]))
            exact = snap is not None and all(first_change.get(c, 1 << 62) > snap["seq"]
                                             for c in later)
            if not exact:
                # No later attempt at all: the final files are the files it was judged on.
                exact = snap is None and not later
                snap = final
            passed, why = T.grade(task, snap["files"])
            mirror = T.run_checks(task["checks"], snap["files"])
            v = next((x for x in verdicts if x["seq"] > e["seq"]
                      and (x["data"]["task"], x["data"]["attempt"]) == (d["task"], d["attempt"])),
                     None)
            vd = (v or {}).get("data") or {}
            self.record["attempts"].append({
                "attempt": d["attempt"], "child_run_id": child,
                "run_status": d.get("child_status"),
                "checks_passed": all(r.get("passed") for r in d.get("results", [])),
                "checks_by": "weft",
                "mirror_agrees": all(r.get("passed") for r in d.get("results", []))
                == all(r["passed"] for r in mirror),
                "grader_passed": passed, "grader_why": why,
                "files": "exact" if exact else "final",
                "verdict": ({"tier": vd.get("tier"),
                             "verdict": (vd.get("verdict") or {}).get("verdict"),
                             "reason_code": (vd.get("verdict") or {}).get("reason_code"),
                             "feedback": ((vd.get("verdict") or {}).get("feedback") or "")[:300]}
                            if v else None)})
        kinds = [e["kind"] for e in events]
        self.record["retries"] = kinds.count("task_retrying")
        self.record["replans"] = kinds.count("replan_requested")
        self.record["plan_rejected"] = kinds.count("plan_rejected")
        self.record["verifier_unreadable"] = kinds.count("verifier_unreadable")
        self.record["budget_exhausted"] = [e["data"] for e in events
                                           if e["kind"] == "budget_exhausted"]
        self.record["task_finished"] = [e["data"] for e in events if e["kind"] == "task_finished"]
        return final

    def run(self) -> dict:
        t0 = time.monotonic()
        try:
            self.setup()
            final = self.run_plan() if self.spec["mode"] == "plan" else self.run_loop()
            passed, why = T.grade(self.task, final["files"])
            results = T.run_checks(self.task["checks"], final["files"])
            last = self.record["runs"][-1]
            self.record.update({
                "passed": passed, "grader_why": why,
                "public_checks_passed": all(r["passed"] for r in results),
                "status": last["status"], "reported_ok": last["status"] == "succeeded",
                "followups": max(0, len(self.record["runs"]) - 1)
                if self.spec["mode"] == "loop" else 0,
            })
            self.record.setdefault("retries", 0)
            self.record.setdefault("replans", 0)
        except Exception as e:  # noqa: BLE001 -- one case's failure must not end a long run
            self.record["error"] = f"{type(e).__name__}: {e}"
            self.record["passed"] = False
            if not isinstance(e, (httpx.HTTPError, HarnessError)):
                import traceback  # noqa: PLC0415
                self.record["traceback"] = traceback.format_exc()[-2000:]
        self.record["wall_s"] = round(sum(r["wall_s"] for r in self.record["runs"]), 2)
        self.record["tokens"] = sum(r["tokens"] for r in self.record["runs"])
        self.record["case_s"] = round(time.monotonic() - t0, 2)
        return self.record


# --- the driver -------------------------------------------------------------------------------


def load_frozen(tasks: list[dict], allow_unfrozen: bool) -> dict:
    frozen = json.loads(T.FROZEN.read_text())
    problems = T.verify_frozen(tasks, frozen)
    if problems:
        for m in problems:
            say(f"frozen.json: {m}")
        if not allow_unfrozen:
            raise SystemExit("the task set or the arms differ from tests/harness_b/frozen.json: "
                             "scoring is only over the frozen set (--allow-unfrozen for a dry run "
                             "that is not reported)")
        frozen = T.frozen_doc(tasks)
    return frozen


def save(path: Path, doc: dict) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
    tmp.replace(path)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--url", default=os.environ.get("WEFT_URL") or os.environ.get("WEFT_BASE_URL"))
    p.add_argument("--token", default=os.environ.get("WEFT_TOKEN"))
    p.add_argument("--model", default="real-openai", help="the agents' model (an alias)")
    p.add_argument("--arms", default="all", help="all, or a comma list of " + ",".join(ARM_NAMES))
    p.add_argument("--tasks", type=int, help="only the first N tasks (a smoke run)")
    p.add_argument("--only", help="only these task ids (comma list)")
    p.add_argument("--out", default="results.json")
    p.add_argument("--fresh", action="store_true", help="ignore what --out already holds")
    p.add_argument("--jobs", type=int, default=1,
                   help="cases run at once (default 1). More keeps llama-server's parallel slots "
                        "busy; the seconds per case then include waiting on the others' turns")
    p.add_argument("--allow-unfrozen", action="store_true",
                   help="run even when the tasks differ from frozen.json (never for scoring)")
    args = p.parse_args(argv)
    if not args.url or not args.token:
        p.error("--url and --token (or WEFT_URL and WEFT_TOKEN) are required")
    arms = ARM_NAMES if args.arms == "all" else [a.strip() for a in args.arms.split(",")]
    if bad := [a for a in arms if a not in ARM_NAMES]:
        p.error(f"unknown arms {bad}: choose from {ARM_NAMES}")

    tasks = T.generate()
    frozen = load_frozen(tasks, args.allow_unfrozen)
    if args.only:
        want = set(args.only.split(","))
        tasks = [t for t in tasks if t["id"] in want]
    if args.tasks:
        tasks = tasks[:args.tasks]

    out = Path(args.out)
    meta = {"url": args.url, "model": args.model, "set_sha256": frozen["set_sha256"],
            "arms_sha256": frozen["arms_sha256"], "frozen": not args.allow_unfrozen}
    doc = {"meta": {**meta, "started_at": datetime.now().astimezone().isoformat()},
           "results": []}
    if out.exists() and not args.fresh:
        old = json.loads(out.read_text())
        same = all(old.get("meta", {}).get(k) == meta[k]
                   for k in ("model", "set_sha256", "arms_sha256"))
        if not same:
            raise SystemExit(f"{out} holds results of another model, task set or arms: "
                             "use another --out, or --fresh to overwrite it")
        doc = old
        doc["results"] = [r for r in doc["results"] if not r.get("error")]
    done = {(r["task"], r["arm"]) for r in doc["results"]}

    w = Weft(args.url, args.token)
    tag = secrets.token_hex(3)
    todo = [(t, a) for t in tasks for a in arms if (t["id"], a) not in done]
    say(f"harness_b: {len(todo)} (task, arm) pairs to run, {len(done)} already in {out}; "
        f"model {args.model}, tag {tag}")
    doc["meta"]["jobs"] = max(doc["meta"].get("jobs", 1), args.jobs)
    lock = threading.Lock()

    def one(i: int, task: dict, arm: str) -> None:
        say(f"[{i}/{len(todo)}] {task['id']} / {arm}")
        rec = Case(w, frozen, tag, task, arm, args.model).run()
        rec["jobs"] = args.jobs
        say(f"  [{i}] {task['id']} / {arm} -> passed={rec['passed']} status={rec.get('status')} "
            f"tokens={rec['tokens']} wall={rec['wall_s']}s retries={rec.get('retries', 0)} "
            f"replans={rec.get('replans', 0)}"
            + (f" ERROR {rec['error']}" if rec["error"] else "")
            + (f" ({rec.get('grader_why')})" if not rec["passed"] else ""))
        with lock:
            doc["results"].append(rec)
            doc["meta"]["updated_at"] = datetime.now().astimezone().isoformat()
            save(out, doc)

    if args.jobs <= 1:
        for i, (task, arm) in enumerate(todo, 1):
            one(i, task, arm)
    else:
        from concurrent.futures import ThreadPoolExecutor
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            for f in [pool.submit(one, i, t, a) for i, (t, a) in enumerate(todo, 1)]:
                f.result()
    say(f"harness_b: results in {out}; the table: python3 tests/harness_b/report.py {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
