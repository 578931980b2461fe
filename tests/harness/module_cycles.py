#!/usr/bin/env python3
"""Import cycles between the modules of each Rust crate in the workspace.

A module is a file (`src/a/b.rs` or `src/a/b/mod.rs` is `a::b`). Module A depends on module B
when A's production code (everything before a trailing `#[cfg(test)] mod`) names a path into B:
`crate::b::…`, `super::…`, `self::…`, or a child or top-level module by its bare name in a `use`.
Declaring a child (`mod b;`) is not a dependency. Every strongly connected component with more
than one module is a cycle, printed with one edge of each pair as evidence.

usage: module_cycles.py [CRATE_DIR ...]   (default: every workspace member with a src/)
Exit 1 when a cycle exists.
"""
from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
IDENT = r"[A-Za-z_][A-Za-z0-9_]*"


def members() -> list[Path]:
    ws = tomllib.loads((ROOT / "Cargo.toml").read_text())["workspace"]["members"]
    return [ROOT / m for m in ws if (ROOT / m / "src").is_dir()]


def module_of(src: Path, f: Path) -> tuple[str, ...]:
    rel = f.relative_to(src).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] in ("mod", "lib", "main"):
        parts = parts[:-1]
    return tuple(parts)


def production(text: str) -> str:
    """The text before a trailing `#[cfg(test)] mod … {` block, comments removed."""
    m = re.search(r"^#\[cfg\(test\)\]\s*\n\s*(pub(\(crate\))? )?mod \w+\s*\{", text, re.M)
    if m:
        text = text[: m.start()]
    text = re.sub(r"//[^\n]*", "", text)
    return re.sub(r"/\*.*?\*/", "", text, flags=re.S)


def use_paths(text: str) -> list[list[str]]:
    """Every path named: in `use` trees (expanded one level of braces) and inline `crate::`,
    `super::` and `self::` paths."""
    out: list[list[str]] = []
    for m in re.finditer(r"\buse\s+([^;]+);", text):
        tree = re.sub(r"\s+", "", m.group(1))
        stack = [("", tree)]
        while stack:
            prefix, t = stack.pop()
            b = t.find("{")
            if b < 0:
                out.append((prefix + t).split("::"))
                continue
            head, inner = t[:b], t[b + 1 : t.rfind("}")]
            depth, cur, parts = 0, "", []
            for ch in inner:
                if ch == "," and depth == 0:
                    parts.append(cur)
                    cur = ""
                    continue
                depth += ch == "{"
                depth -= ch == "}"
                cur += ch
            parts.append(cur)
            for p in parts:
                if p:
                    stack.append((prefix + head, p))
    for m in re.finditer(rf"\b(crate|super|self)((?:::{IDENT})+)", text):
        out.append([m.group(1)] + m.group(2).split("::")[1:])
    return out


def resolve(path: list[str], here: tuple[str, ...], modules: set[tuple[str, ...]]):
    """The deepest module `path` (as written in module `here`) reaches, if it is in this crate."""
    path = [p.split(" as ")[0] for p in path if p and p != "*"]
    if not path:
        return None
    head = path[0]
    if head == "crate":
        base, rest = (), path[1:]
    elif head in ("super", "self"):
        base = here
        i = 0
        while i < len(path) and path[i] in ("super", "self"):
            if path[i] == "super":
                base = base[:-1]
            i += 1
        rest = path[i:]
    elif here + (head,) in modules:
        base, rest = here, path
    elif (head,) in modules and here == ():
        base, rest = (), path
    else:
        return None
    target = base
    for seg in rest:
        if target + (seg,) in modules:
            target = target + (seg,)
        else:
            break
    return target


def crate_cycles(crate: Path) -> list[tuple[list[str], list[str]]]:
    src = crate / "src"
    files = {module_of(src, f): f for f in src.rglob("*.rs") if "bin" not in f.relative_to(src).parts[:1]}
    modules = set(files)
    edges: dict[tuple, set[tuple]] = {m: set() for m in modules}
    for m, f in files.items():
        for p in use_paths(production(f.read_text())):
            t = resolve(p, m, modules)
            if t is not None and t != m and t != ():
                # A module naming its own ancestor through `super::` to reach an item defined in
                # that ancestor is still a dependency on it.
                edges[m].add(t)
    # Tarjan's strongly connected components.
    index: dict = {}
    low: dict = {}
    on: set = set()
    stack: list = []
    out = []
    counter = [0]

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                names = sorted("::".join(c) or "crate" for c in comp)
                ev = sorted(
                    f"{'::'.join(a) or 'crate'} -> {'::'.join(b) or 'crate'}"
                    for a in comp
                    for b in edges[a]
                    if b in comp
                )
                out.append((names, ev))

    sys.setrecursionlimit(10000)
    for v in sorted(modules):
        if v not in index:
            strong(v)
    return out


def main() -> int:
    crates = [Path(a).resolve() for a in sys.argv[1:]] or members()
    found = 0
    for c in crates:
        for names, ev in crate_cycles(c):
            found += 1
            print(f"{c.relative_to(ROOT)}: cycle between {', '.join(names)}")
            for e in ev:
                print(f"    {e}")
    print(f"{found} import cycle(s) in {len(crates)} crate(s)")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
