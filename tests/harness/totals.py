#!/usr/bin/env python3
"""tests/harness/totals.py — the totals deploy/local/test.sh prints in its summary (stdlib only).

    totals.py compat LOGS     "N passed, M failed[, K skipped]" over LOGS/pytest-*.xml
    totals.py security LOGS   one line of sizes per security suite that ran
                              (LOGS/security-{nul,schemathesis}.{json,xml})

Prints nothing when there is nothing to count.
"""

import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path


def _suites(path):
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return None
    return [root] if root.tag == "testsuite" else list(root.iter("testsuite"))


def compat(logs: Path) -> None:
    reports = sorted(logs.glob("pytest-*.xml"))
    if not reports:
        return
    passed = failed = skipped = 0
    for path in reports:
        for suite in _suites(path) or []:
            n, f, e, s = (int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped"))
            passed += n - f - e - s
            failed += f + e
            skipped += s
    print(f"{passed} passed, {failed} failed" + (f", {skipped} skipped" if skipped else ""))


def security(logs: Path) -> None:
    def load(name, key):
        try:
            return json.loads((logs / f"security-{name}.json").read_text()).get(key)
        except (OSError, ValueError):
            return None

    def failed(name):
        suites = _suites(logs / f"security-{name}.xml")
        if suites is None:
            return "?"
        return sum(int(s.get("failures", 0)) + int(s.get("errors", 0)) for s in suites)

    nul = load("nul", "nul_pass")
    if nul:
        print(f"security: NUL / oversize / wrong-type pass: {nul['operations']} operations x "
              f"{nul['cases']} cases, {nul['failed']} cases failed ({failed('nul')} operations failed)")
    st = load("schemathesis", "schemathesis")
    if st:
        print(f"security: schemathesis: {st.get('examples', 0)} examples over "
              f"{st.get('operations', 0)} operations (seed {st['seed']}, "
              f"{st['max_examples_per_operation']} fuzzed per operation), "
              f"{failed('schemathesis')} operations failed")


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("compat", "security"):
        sys.exit("usage: totals.py compat|security LOGS")
    {"compat": compat, "security": security}[sys.argv[1]](Path(sys.argv[2]))
