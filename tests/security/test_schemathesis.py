"""schemathesis over weft's own OpenAPI document (`/v1/openapi.json`), against a live `weft up`.

Every operation in the document is generated for: its examples, the coverage phase's boundary
values, and `WEFT_SCHEMATHESIS_EXAMPLES` fuzzed examples per operation, from the fixed seed
`WEFT_SCHEMATHESIS_SEED`, positive and negative. Each answer must pass:
  - not_a_server_error          no 5xx, ever
  - status_code_conformance     the status is documented for the operation
  - content_type_conformance    the content type is documented for that status
  - response_schema_conformance the body matches the documented schema
  - response_headers_conformance documented headers are present and well formed
  - negative_data_rejection     a request the document forbids is refused (the server is at least
                                as strict as the document says)
`positive_data_acceptance` is not run: the server rightly refuses some schema-valid requests
for reasons a JSON schema cannot state (an agent name that does not exist, `expires_at` in the
past, `from` after `to`, a tool result in an assistant message).

What is steered, and why (nothing is excluded):
  - U+0000 is not generated (`allow-x00 = false`): native routes refuse it by design with a 400
    naming the field, which test_nul_oversize_types.py checks field by field.
  - Path parameters are sometimes the real things the document's examples name (the agent, a
    finished run, a parked interactive run, a disposable token; an A2A task, finished or
    waiting for input), so operations get past 404.
  - A JSON-RPC route (`POST /a2a/rpc`) answers a request it refuses with a 200 carrying a
    JSON-RPC `error`, as its document says and JSON-RPC clients need: for negative data that
    is the refusal negative_data_rejection asks for; a `result` is not.
  - `DELETE /v1/tokens/{id}` never gets the id of a token that existed before the suite started
    (the admin token it runs with among them): revoking it would end the run, not test anything.
  - `GET /v1/runs/{id}/stream` only ever sees the finished run or ids that do not exist: a stream
    of a live run is held open until the run ends (by design, with keepalives), which a
    request/response checker cannot wait for. Replay of a finished run is tested here; the live
    stream in tests/compat/test_runs_http.py.
  - `POST /v1/runs` with both `interactive: true` and `stream: true` is sent with
    `stream: false`, for the same reason: that stream lasts as long as the run waits for input.
  - A volume import's `application/x-tar` body is sent as the bytes generated for it (a
    serializer schemathesis lacks for that media type).
  - A drain that was accepted (`POST /v1/tenants/{tenant}/drain`, `POST /v1/fleet/drain`) is
    resumed at once, after its answer was checked: left in force, it would refuse every later
    run with 503 `tenant_paused`, which is what a drain is for (docs/operations.md), not a fault.
"""

from __future__ import annotations

import os
import uuid
from collections import Counter

import hypothesis.strategies as st
import pytest
import schemathesis
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

import weft_api

SEED = int(os.environ.get("WEFT_SCHEMATHESIS_SEED", "20261123"))
MAX_EXAMPLES = int(os.environ.get("WEFT_SCHEMATHESIS_EXAMPLES", "40"))
REQUEST_TIMEOUT_SECS = 30

# The operations that answer JSON-RPC (refusals in a 200 body), from the document.
JSONRPC_PATHS = frozenset(
    op.path for op in weft_api.operations(weft_api.fetch_document())
    if op.method == "post" and op.answers_jsonrpc
)


def _jsonrpc_error(response) -> bool:
    """Whether `response` is a 200 carrying one JSON-RPC error object (and no result)."""
    if response.status_code != 200:
        return False
    try:
        body = response.json()
    except ValueError:
        return False
    return isinstance(body, dict) and isinstance(body.get("error"), dict) and "result" not in body


def negative_data_rejection_jsonrpc(ctx, response, case):
    """negative_data_rejection, where a JSON-RPC route's refusal is what JSON-RPC makes it: a
    200 carrying an `error` object (the document says so; JSON-RPC clients read typed errors
    only from those). Every other answer is judged by negative_data_rejection itself."""
    op = case.operation
    if op.method.lower() == "post" and op.path in JSONRPC_PATHS and _jsonrpc_error(response):
        return None
    return negative_data_rejection(ctx, response, case)


CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    response_headers_conformance,
    negative_data_rejection_jsonrpc,
]

# Real values for path parameters, filled by the `weft_schema` fixture before any generation.
REAL: dict[str, object] = {}
# Requests sent, by operation.
SENT: Counter[str] = Counter()


def _load():
    config = schemathesis.Config.from_str(
        f"""
seed = {SEED}
request-timeout = {REQUEST_TIMEOUT_SECS}

[generation]
max-examples = {MAX_EXAMPLES}
allow-x00 = false
database = "none"

[auth.openapi.bearer]
bearer = "{weft_api.admin_token()}"
"""
    )
    return schemathesis.openapi.from_url(
        weft_api.base_url() + "/v1/openapi.json", config=config, timeout=30
    )


# Loaded when the module is collected (schemathesis' lazy `from_fixture` does not work with
# pytest 9), from the deployment WEFT_URL names.
schema = _load()


@pytest.fixture(scope="session")
def real_values(prereqs):
    """The real path values the hooks may substitute, made before the first case is generated."""
    REAL.update(
        agent=prereqs.agent,
        finished_run=prereqs.finished_run,
        parked_run=prereqs.parked_run(),
        token=prereqs.token_id,
        protected_tokens=frozenset(prereqs.protected_token_ids),
        a2a_task=prereqs.a2a_task,
        parked_a2a_task=prereqs.parked_a2a_task(),
    )
    weft_api.SIZES["schemathesis"] = {"seed": SEED, "max_examples_per_operation": MAX_EXAMPLES}
    return REAL


def _is(ctx, method: str, path: str) -> bool:
    op = ctx.operation
    return op is not None and op.method.lower() == method and op.path == path


def _absent(value: object) -> str:
    """A run id that exists nowhere, derived from `value` so a seed keeps giving the same one."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, repr(value)))


@schemathesis.hook
def flatmap_path_parameters(ctx, path_parameters):
    if not REAL or not isinstance(path_parameters, dict):
        return st.just(path_parameters)
    op = ctx.operation
    real = dict(path_parameters)
    if "name" in real:
        real["name"] = REAL["agent"]
    if "id" in real and op.path.startswith("/v1/runs/"):
        choices = [REAL["finished_run"]]
        if op.method.lower() == "post":
            choices.append(REAL["parked_run"])
        return st.sampled_from([path_parameters] + [{**real, "id": c} for c in choices])
    if "id" in real and op.path.startswith("/v1/tokens/"):
        real["id"] = REAL["token"]
    if "id" in real and op.path.startswith("/a2a/tasks/"):
        choices = [REAL["a2a_task"]]
        if op.method.lower() == "post":
            choices.append(REAL["parked_a2a_task"])
        return st.sampled_from([path_parameters] + [{**real, "id": c} for c in choices])
    return st.sampled_from([path_parameters, real])


@schemathesis.hook
def map_path_parameters(ctx, path_parameters):
    if not REAL or not isinstance(path_parameters, dict):
        return path_parameters
    if _is(ctx, "get", "/v1/runs/{id}/stream") and path_parameters.get("id") != REAL["finished_run"]:
        return {**path_parameters, "id": _absent(path_parameters.get("id"))}
    if _is(ctx, "delete", "/v1/tokens/{id}") and path_parameters.get("id") in REAL["protected_tokens"]:
        return {**path_parameters, "id": _absent(path_parameters.get("id"))}
    return path_parameters


@schemathesis.hook
def map_body(ctx, body):
    if (
        _is(ctx, "post", "/v1/runs")
        and isinstance(body, dict)
        and body.get("interactive") is True
        and body.get("stream") is True
    ):
        return {**body, "stream": False}
    return body


@schemathesis.serializer("application/x-tar")
def tar_serializer(ctx, value):
    """A volume import's body: the generated bytes as they are (schemathesis knows no tar; the
    server must refuse what is not a tar archive with a 400 naming `body`)."""
    if isinstance(value, bytes):
        return value
    data = getattr(value, "data", None)
    if isinstance(data, bytes):
        return data
    return str(value).encode()


@schema.parametrize()
def test_operation_conforms(case, real_values):
    SENT[case.operation.label] += 1
    sizes = weft_api.SIZES["schemathesis"]
    sizes["examples"] = sum(SENT.values())
    sizes["operations"] = len(SENT)
    try:
        case.call_and_validate(checks=CHECKS)
    finally:
        weft_api.undo_drain(case.operation.method, case.operation.path, case.path_parameters)
