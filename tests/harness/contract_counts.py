#!/usr/bin/env python3
"""Counts what issue 43 measures in production Rust: `json!(` and `v["` per crate folder
(code before a file's trailing `#[cfg(test)] mod`, files under `tests/` left out), and which
workspace crates depend on which (normal dependencies, from `cargo metadata`).

Usage: python3 tests/harness/contract_counts.py [--deps]
"""

import json
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GROUPS = {
    # The MCP server face moved from mcp-bridge to its mount library, shared/mcp-face.
    "gateway + executor + mcp-bridge (+ mcp-face)": ["services/gateway/src",
                                                     "services/executor/src",
                                                     "services/mcp-bridge/src",
                                                     "shared/mcp-face/src"],
    "router": ["services/router/src"],
}
TEST_MOD = re.compile(r"\n#\[cfg\(test\)\]\s*\nmod ")


def production(path: str) -> str:
    text = open(path, encoding="utf-8").read()
    m = TEST_MOD.search(text)
    return text[: m.start()] if m else text


def count(folders: list[str]) -> tuple[int, int, dict[str, tuple[int, int]]]:
    per_file = {}
    for folder in folders:
        for d, _, files in os.walk(os.path.join(ROOT, folder)):
            if "/tests" in d:
                continue
            for f in files:
                if f.endswith(".rs"):
                    p = os.path.join(d, f)
                    s = production(p)
                    n, v = s.count("json!("), s.count('v["')
                    if n or v:
                        per_file[os.path.relpath(p, ROOT)] = (n, v)
    return sum(n for n, _ in per_file.values()), sum(v for _, v in per_file.values()), per_file


def main() -> int:
    for name, folders in GROUPS.items():
        n, v, files = count(folders)
        print(f"{name}: json! {n}, v[\" {v}")
        for p, (fn, fv) in sorted(files.items(), key=lambda kv: -kv[1][0]):
            print(f"  {fn:3} {fv:3}  {p}")
    if "--deps" in sys.argv:
        meta = json.loads(subprocess.run(
            ["cargo", "metadata", "--format-version", "1", "--no-deps"], cwd=ROOT,
            check=True, capture_output=True, text=True).stdout)
        names = {p["name"] for p in meta["packages"]}
        for p in sorted(meta["packages"], key=lambda p: p["name"]):
            deps = sorted(d["name"] for d in p["dependencies"]
                          if d["name"] in names and d.get("kind") is None)
            print(f"{p['name']} -> {' '.join(deps)}")
        users = sorted(p["name"] for p in meta["packages"]
                       if any(d["name"] == "weft-wire" and d.get("kind") is None
                              for d in p["dependencies"]))
        print(f"weft-wire dependents ({len(users)}): {' '.join(users)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
