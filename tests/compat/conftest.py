"""Fixtures for the black-box OpenAI compatibility suite.

The suite talks to an already running weft over HTTP, with the real `openai` package. It is
started by deploy/local/test.sh, which sets:

- WEFT_BASE_URL: the OpenAI base URL, e.g. http://127.0.0.1:PORT/v1
- WEFT_TOKEN: a bearer token with the `admin` scope (tenant `default`)
- WEFT_ARRANGEMENT: which deployment is under test (`weft-up`, `split`), for the report only
"""

import os

import httpx
import openai
import pytest

# Generous for a debug build on a busy 2-core machine, small enough that a hang fails the run.
TIMEOUT = 30.0


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
