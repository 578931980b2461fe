#!/usr/bin/env python3
"""tests/harness_b/report.py RESULTS.json — Suite B's results as markdown tables (stdout).

Per arm: n (cases without a harness error), passed (the hidden grader passes on the final
files), the pass rate with a Wilson 95% interval, tokens and seconds per passed task (all the
arm's tokens or wall seconds, failed cases included, over the passed count), retries, replans,
follow-ups, and the LLM verifier's false accepts (verdict pass, grader fails) and false rejects
(verdict fail or inconclusive, grader passes) per verified attempt. Then the verification
detail (the public checks as a verifier too, and how many judged files were exact) and the
passes per family.
"""

from __future__ import annotations

import json
import math
import sys
from collections import defaultdict

ARM_ORDER = ["loop", "loop_checks", "plan_checks", "plan_llm"]
Z95 = 1.959963984540054


def wilson(k: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of k successes in n trials ((0, 1) when n is 0)."""
    if n == 0:
        return 0.0, 1.0
    p = k / n
    denom = 1 + z * z / n
    center = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, center - half), min(1.0, center + half)


def rate(k: int, n: int) -> str:
    return f"{k}/{n} ({k / n:.0%})" if n else "–"


def per_passed(total: float, passed: int, fmt: str) -> str:
    return format(total / passed, fmt) if passed else "–"


def confusion(attempts: list[dict], accept) -> dict:
    """FA: accepted but the grader fails; FR: rejected but the grader passes."""
    bad = [a for a in attempts if not a["grader_passed"]]
    good = [a for a in attempts if a["grader_passed"]]
    return {"fa": sum(1 for a in bad if accept(a)), "bad": len(bad),
            "fr": sum(1 for a in good if not accept(a)), "good": len(good)}


def llm_verified(rec: dict) -> list[dict]:
    return [a for a in rec.get("attempts", [])
            if (a.get("verdict") or {}).get("tier") == "llm"]


def summarize(results: list[dict]) -> dict:
    by_arm = defaultdict(list)
    for r in results:
        by_arm[r["arm"]].append(r)
    out = {}
    for arm in [a for a in ARM_ORDER if a in by_arm] + sorted(set(by_arm) - set(ARM_ORDER)):
        recs = [r for r in by_arm[arm] if not r.get("error")]
        passed = sum(1 for r in recs if r["passed"])
        lo, hi = wilson(passed, len(recs))
        attempts = [a for r in recs for a in r.get("attempts", [])]
        llm = [a for r in recs for a in llm_verified(r)]
        out[arm] = {
            "n": len(recs), "errors": len(by_arm[arm]) - len(recs), "passed": passed,
            "rate": passed / len(recs) if recs else 0.0, "lo": lo, "hi": hi,
            "tokens": sum(r.get("tokens", 0) for r in recs),
            "seconds": sum(r.get("wall_s", 0) for r in recs),
            "retries": sum(r.get("retries", 0) for r in recs),
            "replans": sum(r.get("replans", 0) for r in recs),
            "followups": sum(r.get("followups", 0) for r in recs),
            "reported_ok": sum(1 for r in recs if r.get("reported_ok")),
            "false_claims": sum(1 for r in recs if r.get("reported_ok") and not r["passed"]),
            "attempts": len(attempts),
            "checks": confusion(attempts, lambda a: a["checks_passed"]),
            "llm": confusion(llm, lambda a: a["verdict"]["verdict"] == "pass"),
            "llm_exact": confusion([a for a in llm if a["files"] == "exact"],
                                   lambda a: a["verdict"]["verdict"] == "pass"),
            "llm_n": len(llm),
            "inconclusive": sum(1 for a in llm if a["verdict"]["verdict"] == "inconclusive"),
            "exact": sum(1 for a in attempts if a["files"] == "exact"),
            "families": defaultdict(lambda: [0, 0]),
        }
        for r in recs:
            fam = out[arm]["families"][r["family"]]
            fam[0] += 1 if r["passed"] else 0
            fam[1] += 1
    return out


def render(doc: dict) -> str:
    meta, results = doc.get("meta", {}), doc.get("results", [])
    s = summarize(results)
    lines = [
        f"Model `{meta.get('model', '?')}`; task set sha256 `{meta.get('set_sha256', '?')[:12]}`, "
        f"arms sha256 `{meta.get('arms_sha256', '?')[:12]}`"
        + ("" if meta.get("frozen", True) else " (NOT the frozen set: not for reporting)")
        + f"; {len(results)} cases.",
        "",
        "| arm | n | passed | pass rate (95% CI) | tokens / passed | s / passed | retries | "
        "replans | follow-ups | verifier FA | verifier FR |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for arm, a in s.items():
        llm = a["llm"]
        has_llm = a["llm_n"] > 0
        lines.append(
            f"| {arm} | {a['n']} | {a['passed']} | {a['rate']:.0%} "
            f"({a['lo']:.0%}–{a['hi']:.0%}) | {per_passed(a['tokens'], a['passed'], ',.0f')} | "
            f"{per_passed(a['seconds'], a['passed'], ',.0f')} | {a['retries']} | {a['replans']} | "
            f"{a['followups']} | {rate(llm['fa'], llm['bad']) if has_llm else '–'} | "
            f"{rate(llm['fr'], llm['good']) if has_llm else '–'} |")
    lines += [
        "",
        "Verification per attempt (FA = accepted while the hidden grader fails, over attempts the "
        "grader fails; FR = rejected while it passes, over attempts it passes):",
        "",
        "| arm | attempts | files exact | public checks FA | public checks FR | LLM verdicts | "
        "LLM FA | LLM FR | LLM FA/FR, exact files only | inconclusive | run reported ok | "
        "reported ok, grader fails | errors |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for arm, a in s.items():
        c, llm, ex = a["checks"], a["llm"], a["llm_exact"]
        has_llm = a["llm_n"] > 0
        lines.append(
            f"| {arm} | {a['attempts']} | {a['exact']} | {rate(c['fa'], c['bad'])} | "
            f"{rate(c['fr'], c['good'])} | {a['llm_n']} | "
            f"{rate(llm['fa'], llm['bad']) if has_llm else '–'} | "
            f"{rate(llm['fr'], llm['good']) if has_llm else '–'} | "
            + (f"{rate(ex['fa'], ex['bad'])} / {rate(ex['fr'], ex['good'])}" if has_llm else "–")
            + f" | {a['inconclusive']} | {a['reported_ok']} | {a['false_claims']} | "
            f"{a['errors']} |")
    families = sorted({f for a in s.values() for f in a["families"]})
    lines += ["", "Passed per family:", "",
              "| arm | " + " | ".join(families) + " |",
              "|---|" + "---|" * len(families)]
    for arm, a in s.items():
        cells = [f"{a['families'][f][0]}/{a['families'][f][1]}" if f in a["families"] else "–"
                 for f in families]
        lines.append(f"| {arm} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: report.py RESULTS.json", file=sys.stderr)
        return 2
    with open(argv[0]) as f:
        doc = json.load(f)
    sys.stdout.write(render(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
