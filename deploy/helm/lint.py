#!/usr/bin/env python3
"""A static lint of the weft Helm chart, for machines without `helm` (deploy/check.sh runs it).

It renders nothing: a Go-template engine with Sprig and Helm's functions is not something to
imitate, and a render that differs from Helm's would prove nothing. What it checks instead,
faithfully:

  Chart.yaml    parses; apiVersion v2, name = the chart's folder, SemVer version, appVersion
  values.yaml   parses; every leaf is documented by a comment (the lines right above its key,
                or one at the end of its line); a leaf is a key whose value is a scalar or a
                collection written on the key's own line (flow style or empty)
  README.md     its values table (between <!-- values:begin --> and <!-- values:end -->) is the
                one generated from values.yaml (--write-readme regenerates it)
  templates/    every action is closed (`{{ ... }}`, comments, strings); trim markers are
                followed or preceded by a space; if/range/with/define/block ... end balance, else
                and break/continue sit where they may, define/block only at top level; every
                `include`/`template` of a literal name names a defined template (no name defined
                twice); every function called is a Go-template, Sprig or Helm function; every
                `.Values.a.b` path (also `$.Values...`, a variable bound to a values path, and `.`
                inside `range`/`with` over a values path) exists in values.yaml, through maps
                (`range` over a map checks the path in every entry); `.X` at the top level is one
                of Helm's built-in objects; no tab characters

Inside a `define` (called with any argument) `.Values...` and `.root.Values...` are checked (the
chart passes either the top context or a dict whose `root` is it); other references whose
context it cannot know (there, or on a call's result) are counted and skipped, never guessed.

Usage: lint.py [CHART_DIR] [--write-readme] [--self-test]
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

try:
    import yaml
except ImportError:  # pragma: no cover - deploy/check.sh installs it first
    sys.exit("lint.py: PyYAML is missing: python3 -m pip install pyyaml")

HERE = Path(__file__).resolve().parent
DEFAULT_CHART = HERE / "weft"

README_BEGIN = "<!-- values:begin -->"
README_END = "<!-- values:end -->"

# --- the functions a chart may call -----------------------------------------------------------

GO_BUILTINS = """and call html index slice js len not or print printf println urlquery eq ge gt le lt
ne""".split()
# Sprig's function map as Helm ships it (Helm drops env and expandenv).
SPRIG = """hello ago date date_in_zone date_modify dateInZone dateModify duration durationRound
htmlDate htmlDateInZone must_date_modify mustDateModify mustToDate now toDate unixEpoch abbrev
abbrevboth trunc trim upper lower title untitle substr repeat trimall trimAll trimSuffix trimPrefix
nospace initials randAlphaNum randAlpha randAscii randNumeric swapcase shuffle snakecase camelcase
kebabcase wrap wrapWith contains hasPrefix hasSuffix quote squote cat indent nindent replace plural
sha1sum sha256sum sha512sum adler32sum toString atoi int64 int float64 seq toDecimal split splitList
splitn toStrings until untilStep add1 add sub div mod mul randInt add1f addf subf divf mulf biggest
max min maxf minf ceil floor round join sortAlpha default empty coalesce all any compact mustCompact
fromJson toJson toPrettyJson toRawJson mustFromJson mustToJson mustToPrettyJson mustToRawJson
ternary deepCopy mustDeepCopy typeOf typeIs typeIsLike kindOf kindIs deepEqual getHostByName base
dir clean ext isAbs osBase osClean osDir osExt osIsAbs b64enc b64dec b32enc b32dec tuple list dict
get set unset hasKey pluck keys pick omit merge mergeOverwrite mustMerge mustMergeOverwrite values
append push mustAppend mustPush prepend mustPrepend first mustFirst rest mustRest last mustLast
initial mustInitial reverse mustReverse uniq mustUniq without mustWithout has mustHas mustSlice
concat dig chunk mustChunk bcrypt htpasswd genPrivateKey derivePassword buildCustomCert genCA
genCAWithKey genSelfSignedCert genSelfSignedCertWithKey genSignedCert genSignedCertWithKey
encryptAES decryptAES randBytes uuidv4 semver semverCompare fail regexMatch mustRegexMatch
regexFindAll mustRegexFindAll regexFind mustRegexFind regexReplaceAll mustRegexReplaceAll
regexReplaceAllLiteral mustRegexReplaceAllLiteral regexSplit mustRegexSplit regexQuoteMeta urlParse
urlJoin""".split()
HELM = """include tpl required toYaml mustToYaml toYamlPretty fromYaml fromYamlArray toToml
fromToml toJson fromJson fromJsonArray lookup""".split()
FUNCTIONS = frozenset(GO_BUILTINS + SPRIG + HELM)
KEYWORDS = frozenset(
    "if else end range with define block template break continue nil true false".split()
)
OPENERS = frozenset({"if", "range", "with", "define", "block"})
BUILTIN_OBJECTS = frozenset(
    {"Values", "Release", "Chart", "Capabilities", "Template", "Files", "Subcharts"}
)

# --- reporting ---------------------------------------------------------------------------------


@dataclass
class Report:
    errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def error(self, where: str, msg: str) -> None:
        self.errors.append(f"{where}: {msg}")

    def note(self, msg: str) -> None:
        self.notes.append(msg)


# --- Chart.yaml --------------------------------------------------------------------------------

SEMVER = re.compile(
    r"^v?(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-[0-9A-Za-z.-]+)?(?:\+[0-9A-Za-z.-]+)?$"
)


def check_chart(chart: Path, rep: Report) -> dict | None:
    path = chart / "Chart.yaml"
    try:
        meta = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as e:
        rep.error(str(path), f"cannot parse: {e}")
        return None
    if not isinstance(meta, dict):
        rep.error(str(path), "is not a mapping")
        return None
    if meta.get("apiVersion") != "v2":
        rep.error(str(path), f"apiVersion must be v2 (Helm 3), got {meta.get('apiVersion')!r}")
    if meta.get("name") != chart.name:
        rep.error(str(path), f"name {meta.get('name')!r} must be the chart's folder {chart.name!r}")
    if not SEMVER.match(str(meta.get("version", ""))):
        rep.error(str(path), f"version must be SemVer, got {meta.get('version')!r}")
    if not meta.get("appVersion"):
        rep.error(str(path), "appVersion is missing (the default image tag)")
    if meta.get("type", "application") not in ("application", "library"):
        rep.error(str(path), f"type must be application or library, got {meta.get('type')!r}")
    return meta


# --- values.yaml: parse, leaves, documentation -------------------------------------------------


@dataclass
class Leaf:
    path: str
    line: int  # 1-based
    default: object
    doc: str


def _comment_of(line: str) -> str | None:
    """The comment at the end of a YAML line, outside quotes, or None."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1] in " \t"):
            return line[i + 1 :].strip()
    return None


def _doc_above(lines: list[str], idx: int) -> str:
    """The comment block directly above line idx (0-based), joined; '' when there is none."""
    out: list[str] = []
    j = idx - 1
    while j >= 0 and lines[j].strip().startswith("#"):
        out.append(lines[j].strip().lstrip("#").strip())
        j -= 1
    return " ".join(reversed(out)).strip()


def _clean_doc(doc: str) -> str:
    return re.sub(r"^--\s*", "", doc).strip()


def values_leaves(text: str, rep: Report, where: str) -> list[Leaf]:
    lines = text.splitlines()
    try:
        root = yaml.compose(text)
    except yaml.YAMLError as e:
        rep.error(where, f"cannot parse: {e}")
        return []
    leaves: list[Leaf] = []

    def walk(node, prefix: str) -> None:
        for key, value in node.value:
            path = f"{prefix}.{key.value}" if prefix else str(key.value)
            block = isinstance(value, yaml.MappingNode) and not value.flow_style and value.value
            if block:
                walk(value, path)
                continue
            line = key.start_mark.line
            doc = _comment_of(lines[line]) or _doc_above(lines, line)
            leaves.append(Leaf(path, line + 1, yaml.safe_load(yaml.serialize(value)), _clean_doc(doc)))

    if root is None:
        return []
    if not isinstance(root, yaml.MappingNode):
        rep.error(where, "is not a mapping")
        return []
    walk(root, "")
    return leaves


def check_values_docs(leaves: list[Leaf], rep: Report, where: str) -> None:
    for leaf in leaves:
        if not leaf.doc:
            rep.error(
                f"{where}:{leaf.line}",
                f"`{leaf.path}` has no comment; document it on the line above (`# -- ...`)",
            )


# --- README.md ---------------------------------------------------------------------------------


def _default_cell(value: object) -> str:
    if isinstance(value, str):
        text = f'"{value}"'
    else:
        text = yaml.safe_dump(value, default_flow_style=True, width=10_000, sort_keys=False).strip()
        text = re.sub(r"\n\.\.\.$", "", text).strip()
    return "`" + text.replace("|", "\\|") + "`"


def readme_table(leaves: list[Leaf]) -> str:
    rows = ["| Key | Default | Description |", "|---|---|---|"]
    for leaf in leaves:
        doc = leaf.doc.replace("|", "\\|")
        rows.append(f"| `{leaf.path}` | {_default_cell(leaf.default)} | {doc} |")
    return "\n".join(rows)


def check_readme(chart: Path, leaves: list[Leaf], rep: Report, write: bool) -> None:
    path = chart / "README.md"
    try:
        text = path.read_text()
    except OSError as e:
        rep.error(str(path), f"cannot read: {e}")
        return
    begin, end = text.find(README_BEGIN), text.find(README_END)
    if begin < 0 or end < begin:
        rep.error(str(path), f"has no {README_BEGIN} ... {README_END} block for the values table")
        return
    want = f"{README_BEGIN}\n{readme_table(leaves)}\n{README_END}"
    have = text[begin : end + len(README_END)]
    if have == want:
        return
    if write:
        path.write_text(text[:begin] + want + text[end + len(README_END) :])
        rep.note(f"rewrote the values table of {path}")
    else:
        rep.error(
            str(path),
            "the values table is not the one values.yaml gives; run "
            "`python3 deploy/helm/lint.py --write-readme`",
        )


# --- templates: actions ------------------------------------------------------------------------


@dataclass
class Action:
    text: str  # the content without delimiters and trim markers
    line: int  # 1-based line of `{{`
    comment: bool


def scan_actions(src: str, rep: Report, where: str) -> list[Action]:
    """Splits a template into its actions, checking delimiters, strings and comments close."""
    out: list[Action] = []
    spans: list[tuple[int, int]] = []
    i, n = 0, len(src)
    while True:
        start = src.find("{{", i)
        if start < 0:
            break
        line = src.count("\n", 0, start) + 1
        j = start + 2
        left_trim = src.startswith("-", j) and j + 1 < n and src[j + 1] in " \t\r\n"
        if src.startswith("-", j) and not left_trim and j + 1 < n and src[j + 1].isalpha():
            rep.error(f"{where}:{line}", "`{{-` must be followed by a space")
        if left_trim:
            j += 2
        k = j
        while k < n and src[k] in " \t\r\n":
            k += 1
        if src.startswith("/*", k):
            close = src.find("*/", k + 2)
            if close < 0:
                rep.error(f"{where}:{line}", "unclosed comment `{{/*`")
                return out
            m = close + 2
            m2 = m
            if src.startswith(" -}}", m2):
                m2 += 4
            elif src.startswith("}}", m2):
                m2 += 2
            else:
                rep.error(f"{where}:{line}", "a comment must end with `*/}}` or `*/ -}}`")
                return out
            out.append(Action(src[k + 2 : close], line, True))
            spans.append((start, m2))
            i = m2
            continue
        # Scan to the closing `}}`, skipping strings (a raw string may span lines).
        k = j
        quote = None
        while k < n:
            ch = src[k]
            if quote:
                if ch == "\\" and quote != "`":
                    k += 2
                    continue
                if ch == quote:
                    quote = None
                elif ch == "\n" and quote != "`":
                    rep.error(f"{where}:{line}", "a string is not closed on its line")
                    return out
            elif ch in "\"'`":
                quote = ch
            elif src.startswith("}}", k):
                break
            elif src.startswith("{{", k):
                rep.error(f"{where}:{line}", "action `{{` is not closed before the next `{{`")
                return out
            k += 1
        if k >= n:
            rep.error(f"{where}:{line}", "action `{{` is not closed with `}}`")
            return out
        body = src[j:k]
        if body.endswith("-") and body[:-1].endswith((" ", "\t", "\n")):
            body = body[:-1]
        elif body.endswith("-") and body[:-1] and body[-2].isalnum():
            rep.error(f"{where}:{line}", "`-}}` must follow a space")
        out.append(Action(body.strip(), line, False))
        spans.append((start, k + 2))
        i = k + 2
    # A `}}` in the plain text is legal Go-template text, but in a manifest or helper it is a
    # broken action (`{ .Values.x }}`); NOTES.txt may hold JSON.
    if where.endswith(".txt"):
        return out
    prev = 0
    for a, b in spans + [(n, n)]:
        stray = src.find("}}", prev, a)
        if stray >= 0:
            rep.error(f"{where}:{src.count(chr(10), 0, stray) + 1}", "`}}` outside an action")
        prev = b
    return out


# --- templates: tokens -------------------------------------------------------------------------

TOKEN = re.compile(
    r"""
    (?P<ws>\s+)
  | (?P<str>"(?:\\.|[^"\\])*"|`[^`]*`)
  | (?P<char>'(?:\\.|[^'\\])+')
  | (?P<op>:=|=|\||\(|\)|,)
  | (?P<var>\$[A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)
  | (?P<num>[+-]?(?:0[xX][0-9a-fA-F_]+|\d[\d_]*(?:\.\d*)?(?:[eE][+-]?\d+)?|\.\d+))
  | (?P<field>(?:\.[A-Za-z_][A-Za-z0-9_]*)+|\.)
  | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
    """,
    re.VERBOSE,
)


@dataclass
class Tok:
    kind: str
    text: str
    glued: bool  # follows the previous token with no space (a field of a call's result)


def tokenize(text: str, rep: Report, where: str) -> list[Tok]:
    toks: list[Tok] = []
    i, glued = 0, False
    while i < len(text):
        m = TOKEN.match(text, i)
        if not m:
            rep.error(where, f"unexpected character {text[i]!r} in `{{{{ {text} }}}}`")
            return toks
        kind = m.lastgroup or ""
        if kind == "ws":
            glued = False
        else:
            toks.append(Tok(kind, m.group(), glued))
            glued = True
        i = m.end()
    return toks


# --- templates: structure, names, functions and values paths -----------------------------------

# A dot or variable context: ("root",), ("define",), ("unknown",) or ("values", path-tuple).
Ctx = tuple


@dataclass
class Frame:
    kind: str  # if range with define block (or "top")
    dot: Ctx
    outer_dot: Ctx
    vars: dict[str, Ctx]
    line: int


@dataclass
class TemplateFacts:
    defines: dict[str, str] = field(default_factory=dict)  # name -> where
    includes: list[tuple[str, str]] = field(default_factory=list)  # (name, where)
    checked: int = 0
    skipped: int = 0
    actions: int = 0


def lookup_path(values: object, path: list[str]) -> str | None:
    """None when path exists in values (a '*' step means every entry of a map); else why not."""
    node = values
    for idx, step in enumerate(path):
        here = ".".join(path[:idx]) or "(top)"
        if step == "*":
            if not isinstance(node, dict):
                return f"`{here}` is not a map to range over"
            for k, child in node.items():
                why = lookup_path(child, path[idx + 1 :])
                if why:
                    return f"in entry `{k}` of `{here}`: {why}"
            return None
        if isinstance(node, dict):
            if step in node:
                node = node[step]
                continue
            if not node:  # an empty map in values.yaml: free-form, filled by the user
                return None
            return f"`{'.'.join(path[: idx + 1])}` is not in values.yaml"
        if node is None or isinstance(node, list):
            return None  # free-form or indexed: nothing to say
        return f"`{here}` is a {type(node).__name__}, it has no `{step}`"
    return None


class TemplateChecker:
    def __init__(self, values: dict, rep: Report, facts: TemplateFacts):
        self.values = values
        self.rep = rep
        self.facts = facts

    # A field chain token -> (context it starts from, the steps after it)
    def _resolve(self, tok: Tok, frames: list[Frame]) -> tuple[Ctx, list[str]]:
        text = tok.text
        if tok.kind == "var":
            name, _, rest = text.partition(".")
            steps = rest.split(".") if rest else []
            if name == "$":
                base = ("define",) if any(f.kind in ("define", "block") for f in frames) else ("root",)
                return base, steps
            for f in reversed(frames):
                if name in f.vars:
                    return f.vars[name], steps
            self.rep.error(self.where, f"variable {name} is used before it is declared")
            return ("unknown",), []
        steps = [s for s in text.split(".") if s]
        return frames[-1].dot, steps

    def _check_ref(self, ctx: Ctx, steps: list[str]) -> None:
        if not steps:
            return
        if ctx[0] in ("root", "define") and steps[0] == "Values":
            why = lookup_path(self.values, steps[1:])
            self.facts.checked += 1
            if why:
                self.rep.error(self.where, f"`.{'.'.join(steps)}`: {why}")
            return
        if ctx[0] == "define" and steps[:2] == ["root", "Values"]:
            # The chart's convention for helpers called with a dict: `.root` is the top context.
            why = lookup_path(self.values, steps[2:])
            self.facts.checked += 1
            if why:
                self.rep.error(self.where, f"`.{'.'.join(steps)}`: {why}")
            return
        if ctx[0] == "root":
            self.facts.checked += 1
            if steps[0] not in BUILTIN_OBJECTS:
                self.rep.error(
                    self.where,
                    f"`.{steps[0]}` is not one of Helm's objects ({', '.join(sorted(BUILTIN_OBJECTS))})",
                )
            return
        if ctx[0] == "values":
            why = lookup_path(self.values, list(ctx[1]) + steps)
            self.facts.checked += 1
            if why:
                self.rep.error(self.where, f"`{'.'.join(list(ctx[1]) + steps)}`: {why}")
            return
        self.facts.skipped += 1

    def _ctx_of(self, toks: list[Tok], frames: list[Frame]) -> Ctx:
        """The values context of a pipeline that is one field chain, else unknown."""
        if len(toks) == 1 and toks[0].kind in ("field", "var"):
            ctx, steps = self._resolve(toks[0], frames)
            if ctx[0] in ("root", "define") and steps[:1] == ["Values"]:
                return ("values", tuple(steps[1:]))
            if ctx[0] == "values":
                return ("values", tuple(ctx[1]) + tuple(steps))
            if ctx[0] == "root" and not steps:
                return ("root",)
        return ("unknown",)

    def _elem_ctx(self, ctx: Ctx) -> Ctx:
        if ctx[0] != "values":
            return ("unknown",)
        node: object = self.values
        for step in ctx[1]:
            node = node.get(step) if isinstance(node, dict) else None
        if isinstance(node, dict) and node:
            return ("values", tuple(ctx[1]) + ("*",))
        return ("unknown",)

    def check_file(self, path: Path, facts_where: str) -> None:
        src = path.read_text()
        for ln, line in enumerate(src.splitlines(), 1):
            if "\t" in line:
                self.rep.error(f"{facts_where}:{ln}", "tab character (YAML indents with spaces)")
        actions = scan_actions(src, self.rep, facts_where)
        self.facts.actions += len(actions)
        frames = [Frame("top", ("root",), ("root",), {"$": ("root",)}, 0)]
        for act in actions:
            if act.comment:
                continue
            self.where = f"{facts_where}:{act.line}"
            toks = tokenize(act.text, self.rep, self.where)
            if not toks:
                self.rep.error(self.where, "empty action `{{ }}`")
                continue
            head = toks[0].text if toks[0].kind == "ident" else ""
            rest = toks[1:]
            if head in OPENERS:
                if head in ("define", "block"):
                    if len(frames) > 1:
                        self.rep.error(self.where, f"`{head}` must be at the top level of a file")
                    if not rest or rest[0].kind != "str":
                        self.rep.error(self.where, f"`{head}` needs a quoted template name")
                    else:
                        name = rest[0].text[1:-1]
                        if name in self.facts.defines:
                            self.rep.error(
                                self.where,
                                f'template "{name}" is also defined at {self.facts.defines[name]}',
                            )
                        self.facts.defines[name] = self.where
                    if head == "block" and rest[1:]:
                        self._pipeline(rest[1:], frames)
                    frames.append(Frame(head, ("define",), ("define",), {"$": ("define",)}, act.line))
                    continue
                new_vars: dict[str, Ctx] = {}
                pipe = rest
                decl = [i for i, t in enumerate(rest) if t.kind == "op" and t.text in (":=", "=")]
                if decl:
                    names = [t.text for t in rest[: decl[0]] if t.kind == "var"]
                    pipe = rest[decl[0] + 1 :]
                self._pipeline(pipe, frames)
                dot = frames[-1].dot
                if head == "range":
                    elem = self._elem_ctx(self._ctx_of(pipe, frames))
                    if decl:
                        if len(names) == 2:
                            new_vars[names[0]] = ("unknown",)
                            new_vars[names[1]] = elem
                        elif len(names) == 1:
                            new_vars[names[0]] = elem
                    frames.append(Frame(head, elem, dot, new_vars, act.line))
                elif head == "with":
                    ctx = self._ctx_of(pipe, frames)
                    if decl:
                        for nm in names:
                            new_vars[nm] = ctx
                    frames.append(Frame(head, ctx, dot, new_vars, act.line))
                else:  # if
                    if decl:
                        for nm in names:
                            new_vars[nm] = self._ctx_of(pipe, frames)
                    frames.append(Frame(head, dot, dot, new_vars, act.line))
                continue
            if head == "else":
                top = frames[-1]
                if top.kind not in ("if", "with", "range"):
                    self.rep.error(self.where, "`else` outside if/with/range")
                    continue
                top.dot = top.outer_dot
                top.vars = {}
                if rest and rest[0].kind == "ident" and rest[0].text in ("if", "with"):
                    self._pipeline(rest[1:], frames)
                    if rest[0].text == "with":
                        top.dot = self._ctx_of(rest[1:], frames)
                elif rest:
                    self.rep.error(self.where, "`else` takes nothing after it but `if` or `with`")
                continue
            if head == "end":
                if rest:
                    self.rep.error(self.where, "`end` takes no arguments")
                if len(frames) == 1:
                    self.rep.error(self.where, "`end` without an open if/range/with/define/block")
                else:
                    frames.pop()
                continue
            if head in ("break", "continue"):
                if not any(f.kind == "range" for f in frames):
                    self.rep.error(self.where, f"`{head}` outside range")
                continue
            if head == "template":
                if not rest or rest[0].kind != "str":
                    self.rep.error(self.where, "`template` needs a quoted template name")
                else:
                    self.facts.includes.append((rest[0].text[1:-1], self.where))
                    self._pipeline(rest[1:], frames)
                continue
            # A plain pipeline, perhaps a declaration `$x := ...` / assignment `$x = ...`.
            if len(toks) >= 2 and toks[0].kind == "var" and toks[1].text in (":=", "="):
                pipe = toks[2:]
                self._pipeline(pipe, frames)
                ctx = self._ctx_of(pipe, frames)
                name = toks[0].text
                if toks[1].text == ":=":
                    frames[-1].vars[name] = ctx
                else:
                    for f in reversed(frames):
                        if name in f.vars:
                            f.vars[name] = ctx
                            break
                    else:
                        self.rep.error(self.where, f"{name} is assigned before it is declared")
                continue
            self._pipeline(toks, frames)
        for f in frames[1:]:
            self.rep.error(
                f"{facts_where}:{f.line}", f"`{f.kind}` is not closed by `end` before the file ends"
            )

    def _pipeline(self, toks: list[Tok], frames: list[Frame]) -> None:
        depth = 0
        prev: Tok | None = None
        for i, t in enumerate(toks):
            if t.kind == "op":
                if t.text == "(":
                    depth += 1
                elif t.text == ")":
                    depth -= 1
                    if depth < 0:
                        self.rep.error(self.where, "unbalanced `)`")
                        return
            elif t.kind == "ident":
                if t.text in ("include", "template") and i + 1 < len(toks):
                    nxt = toks[i + 1]
                    if nxt.kind == "str":
                        self.facts.includes.append((nxt.text[1:-1], self.where))
                if t.text not in FUNCTIONS and t.text not in KEYWORDS:
                    self.rep.error(self.where, f"`{t.text}` is not a Go-template, Sprig or Helm function")
                elif t.text in KEYWORDS - {"nil", "true", "false"}:
                    self.rep.error(self.where, f"`{t.text}` cannot appear inside a pipeline")
            elif t.kind in ("field", "var"):
                if t.kind == "field" and t.glued and prev is not None and prev.text == ")":
                    self.facts.skipped += 1  # a field of a call's result
                else:
                    ctx, steps = self._resolve(t, frames)
                    self._check_ref(ctx, steps)
            prev = t
        if depth != 0:
            self.rep.error(self.where, "unbalanced `(`")


def check_templates(chart: Path, values: dict, rep: Report) -> TemplateFacts:
    facts = TemplateFacts()
    tdir = chart / "templates"
    files = sorted(p for p in tdir.rglob("*") if p.is_file())
    if not files:
        rep.error(str(tdir), "no templates")
    checker = TemplateChecker(values, rep, facts)
    for p in files:
        if p.suffix not in (".yaml", ".yml", ".tpl", ".txt"):
            rep.error(str(p), "unexpected file in templates/ (Helm renders .yaml, .yml, .tpl, .txt)")
            continue
        checker.check_file(p, str(p.relative_to(chart.parent)))
    for name, where in facts.includes:
        if name not in facts.defines:
            rep.error(where, f'include/template "{name}": no template of that name is defined')
    return facts


# --- the whole lint ------------------------------------------------------------------------------


def lint(chart: Path, write_readme: bool = False) -> Report:
    rep = Report()
    check_chart(chart, rep)
    vpath = chart / "values.yaml"
    try:
        vtext = vpath.read_text()
        values = yaml.safe_load(vtext) or {}
    except (OSError, yaml.YAMLError) as e:
        rep.error(str(vpath), f"cannot parse: {e}")
        return rep
    if not isinstance(values, dict):
        rep.error(str(vpath), "is not a mapping")
        return rep
    leaves = values_leaves(vtext, rep, str(vpath))
    check_values_docs(leaves, rep, str(vpath.relative_to(chart.parent)))
    check_readme(chart, leaves, rep, write_readme)
    facts = check_templates(chart, values, rep)
    rep.note(
        f"values.yaml: {len(leaves)} leaves, each documented; README.md table in sync"
        if not rep.errors
        else f"values.yaml: {len(leaves)} leaves"
    )
    rep.note(
        f"templates: {facts.actions} actions, {len(facts.defines)} defines, "
        f"{len(facts.includes)} includes, {facts.checked} references checked against "
        f"values.yaml and Helm's objects, {facts.skipped} skipped (context unknown statically)"
    )
    return rep


# --- self-test: each kind of mistake must fail the lint ------------------------------------------

MUTATIONS = [
    # (description, file, old, new, what the error must mention)
    ("an unclosed if", "templates/pdb.yaml", "{{- end }}\n{{- end }}", "{{- end }}", "not closed"),
    ("a stray end", "templates/hpa.yaml", "{{- end }}\n{{- end }}", "{{- end }}\n{{- end }}\n{{- end }}", "without an open"),
    ("an include of an undefined template", "templates/service.yaml", '"weft.labels"', '"weft.label"', "no template of that name"),
    ("a missing values path", "templates/deployment.yaml", "$svc.terminationGracePeriodSeconds", "$svc.terminationGracePeriod", "not in values.yaml"),
    ("a missing top-level values path", "templates/migrate-job.yaml", ".Values.migration.backoffLimit", ".Values.migration.backofLimit", "not in values.yaml"),
    ("a misspelt function", "templates/configmap.yaml", "| quote }}", "| qoute }}", "not a Go-template"),
    ("an unclosed action", "templates/serviceaccount.yaml", "{{ include \"weft.serviceAccountName\" . }}", "{{ include \"weft.serviceAccountName\" . }", "not closed"),
    ("an undocumented value", "values.yaml", "  # -- Image pull policy.\n", "", "has no comment"),
    ("a values table out of date", "README.md", "| `image.pullPolicy` |", "| `image.pullpolicy` |", "values table"),
]


def self_test(chart: Path) -> int:
    base = lint(chart)
    if base.errors:
        print("lint.py --self-test: the chart itself does not pass; fix that first", file=sys.stderr)
        for e in base.errors:
            print(f"  {e}", file=sys.stderr)
        return 1
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for desc, rel, old, new, expect in MUTATIONS:
            work = Path(tmp) / desc.replace(" ", "-") / chart.name
            shutil.copytree(chart, work)
            target = work / rel
            text = target.read_text()
            if old not in text:
                print(f"  self-test: cannot apply '{desc}': {old!r} not in {rel}", file=sys.stderr)
                failed += 1
                continue
            target.write_text(text.replace(old, new, 1))
            rep = lint(work)
            hit = [e for e in rep.errors if expect in e]
            if hit:
                print(f"  self-test ok: {desc} -> {hit[0].split(': ', 1)[-1]}")
            else:
                print(f"  self-test FAILED: {desc} was not reported (errors: {rep.errors})", file=sys.stderr)
                failed += 1
    print(f"lint.py --self-test: {len(MUTATIONS) - failed} of {len(MUTATIONS)} broken charts rejected")
    return 1 if failed else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("chart", nargs="?", default=str(DEFAULT_CHART), help="the chart folder")
    ap.add_argument("--write-readme", action="store_true", help="regenerate README.md's values table")
    ap.add_argument("--self-test", action="store_true", help="check that broken copies of the chart fail")
    args = ap.parse_args()
    chart = Path(args.chart).resolve()
    if args.self_test:
        return self_test(chart)
    rep = lint(chart, write_readme=args.write_readme)
    for n in rep.notes:
        print(f"  {n}")
    for e in rep.errors:
        print(f"  ERROR {e}", file=sys.stderr)
    print(f"lint.py: {chart.name}: {'FAILED, ' + str(len(rep.errors)) + ' errors' if rep.errors else 'ok'} (not rendered: static checks only)")
    return 1 if rep.errors else 0


if __name__ == "__main__":
    sys.exit(main())
