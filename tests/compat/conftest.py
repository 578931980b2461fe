"""Fixtures for the black-box OpenAI compatibility suite.

The suite talks to an already running weft over HTTP, with the real `openai` package. It is
started by deploy/local/test.sh, which sets:

- WEFT_BASE_URL: the OpenAI base URL, e.g. http://127.0.0.1:PORT/v1
- WEFT_TOKEN: a bearer token with the `admin` scope (tenant `default`)
- WEFT_ARRANGEMENT: which deployment is under test (`weft-up`, `split`), for the report only
"""

import hashlib
import os
import re
import shutil
import subprocess
from pathlib import Path

import httpx
import openai
import pytest

ROOT = Path(__file__).resolve().parents[2]
# The npm clients the suite runs, pinned (package-lock.json): the README's Vercel AI SDK example
# and the Codex CLI.
JS_DIR = Path(__file__).resolve().parent / "readme-js"

# Generous for a debug build on a busy 2-core machine, small enough that a hang fails the run.
TIMEOUT = 30.0


def run_finished(http, run_id):
    """Waits for a run's end by reading its stream to `run_finished` (the stream ends there);
    the run as `GET /v1/runs/{id}` then answers. `http` is an httpx client on `…/v1/`."""
    with http.stream("GET", f"runs/{run_id}/stream") as s:
        assert s.status_code == 200
        for _ in s.iter_lines():
            pass
    return http.get(f"runs/{run_id}").json()


def pytest_report_header(config):
    return (
        f"weft arrangement: {os.environ.get('WEFT_ARRANGEMENT', '?')}, "
        f"base url: {os.environ.get('WEFT_BASE_URL', '(unset)')}"
    )


def _env(name):
    value = os.environ.get(name, "").strip()
    if not value:
        pytest.fail(f"{name} is not set; run the suite through deploy/local/test.sh", pytrace=False)
    return value


@pytest.fixture(scope="session")
def base_url():
    """The OpenAI base URL, ending in /v1 and without a trailing slash."""
    return _env("WEFT_BASE_URL").rstrip("/")


@pytest.fixture(scope="session")
def root_url(base_url):
    """The gateway's origin, for routes outside /v1."""
    return base_url.removesuffix("/v1")


@pytest.fixture(scope="session")
def token():
    return _env("WEFT_TOKEN")


@pytest.fixture(scope="session")
def client(base_url, token):
    """The official SDK, as a user would configure it; no retries so failures surface at once."""
    with openai.OpenAI(base_url=base_url, api_key=token, max_retries=0, timeout=TIMEOUT) as c:
        yield c


@pytest.fixture(scope="session")
def bad_client(base_url):
    with openai.OpenAI(
        base_url=base_url, api_key="wft_not_a_real_token", max_retries=0, timeout=TIMEOUT
    ) as c:
        yield c


@pytest.fixture(scope="session")
def http(base_url, token):
    """A raw HTTP client on the /v1 base, for what the SDK hides (wire format, malformed bodies)."""
    with httpx.Client(
        base_url=base_url + "/",
        headers={"Authorization": f"Bearer {token}"},
        timeout=TIMEOUT,
    ) as c:
        yield c


@pytest.fixture(scope="session")
def fake_upstream():
    """The base URL of `weft-fake-upstream` that weft's `fake-<kind>` providers point at.

    deploy/local/test.sh sets WEFT_FAKE_UPSTREAM and WEFT_REQUIRE_FAKE_UPSTREAM=1, so there a
    missing fake upstream is a failure; run by hand without it, the provider tests are skipped.
    """
    value = os.environ.get("WEFT_FAKE_UPSTREAM", "").strip()
    if not value:
        if os.environ.get("WEFT_REQUIRE_FAKE_UPSTREAM") == "1":
            pytest.fail(
                "WEFT_FAKE_UPSTREAM is not set but WEFT_REQUIRE_FAKE_UPSTREAM=1: "
                "deploy/local/test.sh must start weft-fake-upstream",
                pytrace=False,
            )
        pytest.skip("WEFT_FAKE_UPSTREAM is not set: weft is not configured against fake upstreams")
    return value.rstrip("/")


def _major(node):
    try:
        out = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30)
    except OSError:
        return 0
    m = re.match(r"v(\d+)\.", out.stdout.strip())
    return int(m.group(1)) if out.returncode == 0 and m else 0


def _node_bin_dir():
    """A directory holding `node` (22+) and an `npm` that runs on it."""
    node24 = os.environ.get("WEFT_NODE24", "").strip()
    if node24:
        return Path(node24).parent
    node = shutil.which("node")
    if node and _major(node) >= 22 and shutil.which("npm"):
        return Path(node).parent
    out = subprocess.run(
        ["bash", "-c", 'source tests/mcp/node24.sh >&2 && printf %s "${NODE24_BIN:-}"'],
        cwd=ROOT, env={**os.environ, "ROOT": str(ROOT)},
        capture_output=True, text=True, timeout=600,
    )
    if out.returncode != 0 or not out.stdout:
        pytest.fail(f"no Node 22+ for the npm clients: {out.stderr[-2000:]}")
    return Path(out.stdout)


@pytest.fixture(scope="session")
def node_env():
    """The environment to run Node in, with tests/compat/readme-js's packages installed with
    `npm ci` when node_modules is missing or older than the lock (stamp
    node_modules/.weft-lock-sha256). Node 22+: WEFT_NODE24 (set by deploy/local/test.sh), else a
    `node` on PATH that is 22 or later, else Node 24 from tests/mcp/node24.sh."""
    bin_dir = _node_bin_dir()
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    assert _major(str(bin_dir / "node")) >= 22, f"{bin_dir}/node is older than 22"
    want = hashlib.sha256((JS_DIR / "package-lock.json").read_bytes()).hexdigest()
    stamp = JS_DIR / "node_modules" / ".weft-lock-sha256"
    if not stamp.is_file() or stamp.read_text().strip() != want:
        npm = shutil.which("npm", path=env["PATH"])
        assert npm, f"no npm beside {bin_dir}/node"
        out = subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=JS_DIR, env=env, capture_output=True, text=True, timeout=600,
        )
        assert out.returncode == 0, f"npm ci in {JS_DIR} failed:\n{out.stderr[-3000:]}"
        stamp.write_text(want + "\n")
    return env, bin_dir / "node"
