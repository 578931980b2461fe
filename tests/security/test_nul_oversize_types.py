"""The NUL / oversize / wrong-type pass, generated from the OpenAPI document (not a hand list).

For every operation with a JSON body, query parameters or path parameters, a valid base request
is built from the document's examples (and, for fields an example leaves out, from the schema:
the minimal value it allows). The base request must be accepted. Then one field at a time is
replaced, every field of the body schema included (`$ref`s resolved, nested objects, array items
and each branch of a `oneOf`), and the answer is checked:

  nul         a string containing U+0000          400 naming the field; on the OpenAI- and
                                                   Anthropic-compatible routes, which forward
                                                   text to the provider, anything but a 5xx
  oversize    maxLength + 1 characters             400 naming the field, or 413
  huge        a string past the body cap           413 (body); anything but a 5xx (query)
              (WEFT_MAX_BODY_BYTES + 1 KiB; 64 KiB in a query string)
  big         1 MiB, where no maxLength is given   anything but a 5xx
  wrong-type  a JSON type the schema does not      400 naming the field (or the `oneOf` that
              allow (a number for a string, a      holds it: an untagged union cannot say which
              string for a number, an array for    branch was meant)
              an object, an object for an array)
  as-array    an object written as the array of    400 naming the object itself: serde's derive
              its fields' values                   reads a struct from an array of its fields, so
                                                   an error about an element (`tools[0][1]`) or a
                                                   later check means the array was read as one
  (the whole body as a wrong type or as an array: a 400 from the parser, with no `param`)
  bound       just outside minimum/maximum, and    400 naming the field
              2^63, -1, 1e300, 1.5 where the schema
              forbids them

"Naming the field" is `error.param` equal to its path (`sampling.temperature`,
`messages[0].content`), or the path in backticks in the message (Anthropic's shape has no
`param`; nor has the A2A REST binding's). Path parameters only get the NUL case: a path segment
is always a string.

A JSON-RPC route (`POST /a2a/rpc`) answers its refusals in a 200 carrying a JSON-RPC `error`, as
its document says: such an answer is judged as the status its code stands for (-32600/-32602
a 400, -32001 a 404, -32603 a 500: see `judged`), and must name the field all the same.

Prerequisites are made to exist first (weft_api.Prerequisites): the agent the examples name,
a finished run, a disposable token, an agent offered over A2A and a finished A2A task; routes
that change a run get a fresh parked interactive run for each case (an A2A task's cancel a
fresh parked A2A task), so one case cannot change what the next one meets. The A2A bodies, for
which the document has no example, start from valid ones (`Prerequisites.base_body`).
"""

from __future__ import annotations

import copy
import json
import os
import re
import socket
import threading
import urllib.parse
from dataclasses import dataclass
from typing import Any, Callable

import requests

import weft_api

MAX_BODY_BYTES = int(os.environ.get("WEFT_MAX_BODY_BYTES", str(4 * 1024 * 1024)))
HUGE_BODY = MAX_BODY_BYTES + 1024
HUGE_QUERY = 64 * 1024
BIG = 1024 * 1024
NUL = "a\u0000b"
TIMEOUT = 60

# --- the schema walk ----------------------------------------------------------------------------

JSON_TYPES = ("string", "integer", "number", "boolean", "array", "object", "null")


def json_type(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, float):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    return "object"


def as_schema(schema: dict[str, Any] | bool) -> dict[str, Any]:
    """`schema` as an object: the boolean schema `true` (any value, as schemars writes a
    `serde_json::Value` field: A2A's `metadata`, a part's `data`) is `{}`."""
    return {} if schema is True else schema


def allowed_types(schema: dict[str, Any]) -> set[str] | None:
    """The JSON types `schema` allows; None when it allows any."""
    if not isinstance(schema, dict):
        return None
    for key in ("oneOf", "anyOf"):
        if key in schema:
            out: set[str] = set()
            for branch in schema[key]:
                t = allowed_types(branch)
                if t is None:
                    return None
                out |= t
            return out
    if "const" in schema:
        return {json_type(schema["const"])}
    if "enum" in schema:
        return {json_type(v) for v in schema["enum"]}
    t = schema.get("type")
    if t is None:
        return None
    types = {t} if isinstance(t, str) else set(t)
    if "number" in types:
        types.add("integer")  # a JSON number without a fraction is still a number
    return types


def branches(schema: dict[str, Any]) -> list[dict[str, Any]]:
    schema = as_schema(schema)
    return schema.get("oneOf") or schema.get("anyOf") or []


def synth(schema: dict[str, Any]) -> Any:
    """The simplest value `schema` allows (its example when it has one)."""
    schema = as_schema(schema)
    if "example" in schema:
        return copy.deepcopy(schema["example"])
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return next(v for v in schema["enum"] if v is not None)
    bs = [b for b in branches(schema) if allowed_types(b) != {"null"}]
    if bs:
        return synth(bs[0])
    types = allowed_types(schema) or {"object"}
    types.discard("null")
    if "object" in types:
        props = schema.get("properties", {})
        return {k: synth(props.get(k, {"type": "string"})) for k in schema.get("required", [])}
    if "array" in types:
        return [synth(schema["items"])] if "items" in schema else []
    if "string" in types:
        if schema.get("format") == "date-time":
            return "2999-01-01T00:00:00Z"
        return "x" * max(1, schema.get("minLength", 1))
    if "integer" in types:
        return int(schema.get("minimum", 1))
    if "number" in types:
        return schema.get("minimum", 0)
    if "boolean" in types:
        return False
    return None


def fits(value: Any, schema: dict[str, Any]) -> bool:
    """Whether `value` could be of `schema`, as far as choosing a `oneOf` branch needs: its JSON
    type, and for an object the properties the branch fixes (`"type": {"const": "tool"}`)."""
    schema = as_schema(schema)
    types = allowed_types(schema)
    if types is not None and json_type(value) not in types:
        return False
    if isinstance(value, dict):
        for k, sub in schema.get("properties", {}).items():
            fixed = [sub["const"]] if "const" in sub else sub.get("enum")
            if fixed is not None and k in value and value[k] not in fixed:
                return False
        if any(k not in value for k in schema.get("required", [])):
            return False
    return True


def set_at(root: Any, tokens: list[str | int], value: Any) -> Any:
    """A copy of `root` with `value` at `tokens` (an empty list is the root itself)."""
    if not tokens:
        return copy.deepcopy(value)
    out = copy.deepcopy(root)
    node = out
    for t in tokens[:-1]:
        node = node[t]
    last = tokens[-1]
    if isinstance(node, list) and isinstance(last, int) and last >= len(node):
        node.append(copy.deepcopy(value))
    else:
        node[last] = copy.deepcopy(value)
    return out


def get_at(root: Any, tokens: list[str | int]) -> Any:
    for t in tokens:
        root = root[t]
    return root


def dotted(tokens: list[str | int]) -> str:
    """serde_path_to_error's notation, as weft's errors use it: `messages[0].content`."""
    out = ""
    for t in tokens:
        out += f"[{t}]" if isinstance(t, int) else (f".{t}" if out else t)
    return out


@dataclass
class Case:
    kind: str
    where: str  # body | query | path
    field: str  # the dotted path, or the parameter's name
    names: tuple[str, ...]  # what the error may name
    shown: str  # the value, short
    expect: tuple[int, ...]
    must_name: bool
    body: Any = None
    query: dict[str, Any] | None = None
    path: dict[str, str] | None = None

    @property
    def label(self) -> str:
        return f"{self.kind} {self.where} `{self.field or '(the body)'}` = {self.shown}"


def wrong_value(types: set[str], preferred: str) -> tuple[Any, str] | None:
    """A value of a JSON type outside `types`, of kind `preferred` when that is outside."""
    candidates = {
        "string": (12345, "12345"),
        "integer": ("1", '"1"'),
        "number": ("1", '"1"'),
        "boolean": ("true", '"true"'),
        "object": ([], "[]"),
        "array": ({}, "{}"),
        "null": (12345, "12345"),
    }
    order = [preferred] + [t for t in ("string", "object", "array", "integer", "boolean") if t != preferred]
    for t in order:
        value, shown = candidates.get(t, (None, ""))
        if json_type(value) not in types and not (json_type(value) == "integer" and "number" in types):
            return value, shown
    return None


def outside_bounds(schema: dict[str, Any], integer: bool) -> list[tuple[Any, str]]:
    """Numbers `schema` forbids: just past each bound, then the absurd ones it also forbids."""
    lo, hi = schema.get("minimum"), schema.get("maximum")
    step = 1 if integer else 0.5
    values: list[Any] = []
    if lo is not None:
        values.append(lo - step)
    if hi is not None:
        values.append(hi + step)
    values += [2**63, -1, 1e300]
    if integer:
        values.append(1.5)

    def forbidden(v: Any) -> bool:
        if integer and isinstance(v, float) and not v.is_integer():
            return True
        if integer and isinstance(v, float) and abs(v) >= 2**63:
            return True
        return (lo is not None and v < lo) or (hi is not None and v > hi)

    out, seen = [], set()
    for v in values:
        if forbidden(v) and repr(v) not in seen:
            seen.add(repr(v))
            out.append((v, repr(v)))
    return out


def body_cases(op: weft_api.Operation, base: Any, schema: dict[str, Any]) -> list[Case]:
    native = not op.forwards_text
    cases: list[Case] = []

    def add(kind, root, tokens, names, value, shown, expect, must_name):
        body = set_at(root, tokens, value)
        cases.append(Case(kind, "body", dotted(tokens), names, shown, expect, must_name, body=body))

    def walk(
        schema: dict[str, Any],
        root: Any,
        tokens: list[str | int],
        unions: tuple[str, ...],
        union_types: set[str] | None,
    ):
        """`unions`: the paths of the `oneOf`s above, which an error may name instead.
        `union_types`: inside a `oneOf` branch, the types the whole union allows (a wrong type
        for one branch may be another branch's right one); None elsewhere."""
        schema = as_schema(schema)
        here = dotted(tokens)
        names = unions + ((here,) if here else ())
        types = allowed_types(schema)
        current = get_at(root, tokens)
        if union_types is None and types is not None:
            preferred = "string" if "string" in types else json_type(current)
            wrong = wrong_value(types, preferred)
            if wrong is not None:
                add("wrong-type", root, tokens, names, wrong[0], wrong[1], (400,), True)
        if (
            isinstance(current, dict)
            and schema.get("properties")
            and "array" not in (union_types if union_types is not None else types or set())
        ):
            # The object written as an array of its fields' values (in the served document's
            # order, which need not be the struct's): refused as a whole, at this path.
            props = list(schema["properties"].items())
            last = max((i for i, (p, _) in enumerate(props) if p in current), default=-1)
            fields = [current[p] if p in current else synth(sub) for p, sub in props[: last + 1]]
            add("as-array", root, tokens, names, fields, json.dumps(fields)[:60], (400,), True)
        bs = branches(schema)
        if bs:
            inner = unions + ((here,) if here else ())
            for b in bs:
                bt = allowed_types(b)
                if bt == {"null"}:
                    continue
                value = current if fits(current, b) else synth(b)
                walk(b, set_at(root, tokens, value), tokens, inner, types)
            return
        if types is None:
            return
        if "object" in types and isinstance(current, dict):
            for prop, sub in schema.get("properties", {}).items():
                child = root
                if current.get(prop) is None:
                    child = set_at(root, tokens + [prop], synth(sub))
                walk(sub, child, tokens + [prop], unions, None)
            extra = schema.get("additionalProperties")
            if isinstance(extra, dict) and extra:
                walk(extra, set_at(root, tokens + ["k"], synth(extra)), tokens + ["k"], unions, None)
        if "array" in types and isinstance(current, list) and "items" in schema:
            item = current[0] if current else synth(schema["items"])
            walk(schema["items"], set_at(root, tokens + [0], item), tokens + [0], unions, None)
        if "string" in types and isinstance(current, str):
            nul_expect, nul_named = ((400,), True) if native else (tuple(range(200, 500)), False)
            add("nul", root, tokens, names, NUL, repr(NUL), nul_expect, nul_named)
            if "maxLength" in schema:
                n = schema["maxLength"] + 1
                add("oversize", root, tokens, names, "x" * n, f"{n} chars", (400, 413), True)
            else:
                add("huge", root, tokens, names, "x" * HUGE_BODY, f"{HUGE_BODY} chars", (413,), False)
                add("big", root, tokens, names, "x" * BIG, f"{BIG} chars", tuple(range(200, 500)), False)
        if json_type(current) in ("integer", "number") and types & {"integer", "number"}:
            integer = "number" not in types
            for v, shown in outside_bounds(schema, integer):
                add("bound", root, tokens, names, v, shown, (400,), True)

    walk(schema, base, [], (), None)
    # The same request can be reached through two branches; send each once.
    unique: dict[str, Case] = {}
    for c in cases:
        key = json.dumps([c.kind, c.field, c.body], sort_keys=True, default=str)
        unique.setdefault(key, c)
    return list(unique.values())


def query_cases(op: weft_api.Operation, base: dict[str, Any]) -> list[Case]:
    native = not op.forwards_text
    cases = []
    for p in op.parameters("query"):
        name, schema = p["name"], p.get("schema", {})
        types = allowed_types(schema) or {"string"}

        def add(kind, value, shown, expect, must_name):
            cases.append(Case(kind, "query", name, (name,), shown, expect, must_name, query={**base, name: value}))

        if "string" in types:
            add("nul", NUL, repr(NUL), (400,) if native else tuple(range(200, 500)), native)
            if "maxLength" in schema:
                n = schema["maxLength"] + 1
                add("oversize", "x" * n, f"{n} chars", (400,), True)
            else:
                add("huge", "x" * HUGE_QUERY, f"{HUGE_QUERY} chars", tuple(range(200, 500)), False)
        if types & {"integer", "number"}:
            add("wrong-type", "abc", '"abc"', (400,), True)
            for v, shown in outside_bounds(schema, integer="number" not in types):
                add("bound", json.dumps(v) if isinstance(v, float) else str(v), shown, (400,), True)
    return cases


def path_cases(op: weft_api.Operation, base: dict[str, str]) -> list[Case]:
    if op.forwards_text:
        return []
    return [
        Case("nul", "path", p["name"], (p["name"],), repr(NUL), (400,), True, path={**base, p["name"]: NUL})
        for p in op.parameters("path")
    ]


# --- running ------------------------------------------------------------------------------------


def base_query(op: weft_api.Operation) -> dict[str, Any]:
    return {p["name"]: p["example"] for p in op.parameters("query") if "example" in p}


def base_body(op: weft_api.Operation, pre: weft_api.Prerequisites) -> Any:
    schema = op.body_schema()
    if schema is None:
        return None
    given = pre.base_body(op)
    return synth(schema) if given is None else given


@dataclass
class Answer:
    status_code: int
    text: str

    def json(self) -> Any:
        return json.loads(self.text)


def send_raw(method: str, url: str, headers: dict[str, str], body: bytes) -> Answer:
    """One request over a fresh connection, reading the answer while the body is still being
    written. A server refusing a body over its cap answers 413 and closes the connection
    without reading the rest; a client that reads only after writing everything (requests does)
    then often sees a reset instead of the answer."""
    u = urllib.parse.urlsplit(url)
    sock = socket.create_connection((u.hostname, u.port), timeout=TIMEOUT)
    target = u.path + (f"?{u.query}" if u.query else "")
    head = f"{method} {target} HTTP/1.1\r\nHost: {u.netloc}\r\nConnection: close\r\n"
    head += f"Content-Length: {len(body)}\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"

    def write():
        try:
            sock.sendall(head.encode() + body)
        except OSError:
            pass  # answered and closed before reading it all

    writer = threading.Thread(target=write, name="send-raw", daemon=True)
    writer.start()
    data = b""
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
            top, sep, rest = data.partition(b"\r\n\r\n")
            length = re.search(rb"(?im)^content-length:\s*(\d+)", top)
            if sep and length and len(rest) >= int(length.group(1)):
                break
    except OSError:
        pass  # a reset after the answer arrived
    finally:
        sock.close()
        writer.join(TIMEOUT)
    top, _, rest = data.partition(b"\r\n\r\n")
    status = re.match(rb"HTTP/1\.[01] (\d{3})", top)
    assert status, f"{method} {url}: the connection closed without an answer ({len(data)} bytes read)"
    return Answer(int(status.group(1)), rest.decode("utf-8", "replace"))


def send(http: requests.Session, op: weft_api.Operation, path: dict[str, str], query, body) -> Answer:
    url = weft_api.base_url() + op.path.format(**{k: requests.utils.quote(v, safe="") for k, v in path.items()})
    if query:
        url += "?" + urllib.parse.urlencode(query)
    data = None
    headers = {"Authorization": http.headers["Authorization"]}
    if isinstance(body, bytes):
        # A body that is not JSON (a tenant archive): sent as the media type the route takes.
        data = body
        headers["Content-Type"] = next(iter(op.raw.get("requestBody", {}).get("content", {})), "application/octet-stream")
    elif op.body_schema() is not None and (body is not None or op.body_required()):
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    if data is not None and len(data) > BIG:
        return send_raw(op.method.upper(), url, headers, data)
    resp = http.request(op.method.upper(), url, data=data, headers=headers, timeout=TIMEOUT)
    return Answer(resp.status_code, resp.text)


# The HTTP statuses of the refusals a JSON-RPC route answers in a 200 (docs/a2a.md's table):
# parse, request, method and params errors are 400s, no such task a 404, an internal error a 500;
# A2A's other codes (-32002 … -32009: not cancelable, unsupported, …) are 400s.
JSONRPC_STATUS = {-32700: 400, -32600: 400, -32601: 400, -32602: 400, -32001: 404, -32603: 500}


def judged(op: weft_api.Operation, resp: Answer) -> Answer:
    """`resp` as the suite judges it. On a JSON-RPC route a 200 carrying an `error` is the
    refusal its code stands for, with that error as an error body; -32601 (no such method) names
    `method` by its code. Every other answer is itself."""
    if not op.answers_jsonrpc or resp.status_code != 200:
        return resp
    try:
        body = resp.json()
    except ValueError:
        return resp  # an SSE stream (SendStreamingMessage): an answer, not a refusal
    err = body.get("error") if isinstance(body, dict) else None
    if not isinstance(err, dict):
        return resp
    code = err.get("code")
    a2a_code = isinstance(code, int) and -32099 <= code <= -32000
    status = JSONRPC_STATUS.get(code, 400 if a2a_code else 500)
    param = "method" if code == -32601 else None
    return Answer(status, json.dumps({"error": {"message": err.get("message", ""), "param": param}}))


def named(resp: Answer, names: tuple[str, ...]) -> bool:
    """Whether the error names one of `names`; for the body itself (no names), whether it is the
    parser's refusal of the whole body (no `param`), not a later check of one field."""
    param, message = weft_api.error_of(resp)
    if not names:
        return param in (None, "", ".")
    return param in names or any(f"`{n}`" in message for n in names)


def changes_a_run(op: weft_api.Operation) -> bool:
    return op.method != "get" and op.path.startswith("/v1/runs/{id}")


def has_inputs(op: weft_api.Operation) -> bool:
    return bool(op.body_schema() is not None or op.parameters("query") or op.parameters("path"))


def _ops() -> list[weft_api.Operation]:
    doc = weft_api.fetch_document()
    return [op for op in weft_api.operations(doc) if has_inputs(op)]


def pytest_generate_tests(metafunc):
    if "operation" in metafunc.fixturenames:
        ops = _ops()
        metafunc.parametrize("operation", ops, ids=[op.label for op in ops])


def test_nul_oversize_wrong_type(operation: weft_api.Operation, http, prereqs):
    op = operation
    # Each operation starts from the examples' agent as the document describes it (an earlier
    # operation may have retired it or activated another version).
    prereqs.setup_agent()
    fresh_run: Callable[[], str | None] = (
        prereqs.parked_plan_run if op.method == "put" and op.path == "/v1/runs/{id}/plan"
        else prereqs.parked_a2a_task if op.method == "post" and op.path == "/a2a/tasks/{id}:cancel"
        else prereqs.parked_run if changes_a_run(op) else (lambda: None)
    )
    path = weft_api.path_values(op, prereqs)
    query = base_query(op)
    body = base_body(op, prereqs)

    cases = []
    schema = op.body_schema()
    if schema is not None:
        cases += body_cases(op, body, schema)
    cases += query_cases(op, query)
    cases += path_cases(op, path)

    failures = []
    for case in cases:
        case_path = case.path or weft_api.path_values(op, prereqs, fresh_run())
        resp = judged(op, send(
            http,
            op,
            case_path,
            query if case.query is None else case.query,
            body if case.where != "body" else case.body,
        ))
        ok = resp.status_code in case.expect
        if ok and case.must_name and resp.status_code == 400:
            ok = named(resp, case.names)
        if not ok:
            failures.append(f"  {case.label}: {resp.status_code} {resp.text[:300]}")

    # The base request last: it may change what it acts on (revoke the token, retire the agent).
    # An import's base body is a real archive: that of a tenant with nothing in it, imported
    # as the path's tenant (it adds nothing).
    base_path = weft_api.path_values(op, prereqs, fresh_run())
    if op.method == "post" and op.path == "/v1/tenants/{tenant}/import":
        body = weft_api.tenant_archive("nul-pass-empty")
    base = judged(op, send(http, op, base_path, query, body))
    weft_api.undo_drain(op.method, op.path, base_path)
    base_ok = base.status_code < 500 and base.status_code not in (400, 413, 415, 422)

    sizes = weft_api.SIZES.setdefault("nul_pass", {"operations": 0, "cases": 0, "failed": 0, "by_operation": {}})
    sizes["operations"] += 1
    sizes["cases"] += len(cases)
    sizes["failed"] += len(failures)
    sizes["by_operation"][op.label] = {"cases": len(cases), "failed": len(failures), "base_status": base.status_code}

    problems = []
    if not base_ok:
        problems.append(f"the base request was refused: {base.status_code} {base.text[:300]}")
    if failures:
        problems.append(f"{len(failures)} of {len(cases)} cases answered otherwise:\n" + "\n".join(failures))
    assert not problems, f"{op.label}:\n" + "\n".join(problems)
