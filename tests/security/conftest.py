"""Fixtures of the security suites, and their sizes: each suite adds its counts to
`weft_api.SIZES`, which is printed after the run and, when WEFT_SECURITY_REPORT names a file,
written there as JSON for deploy/local/test.sh's summary."""

from __future__ import annotations

import json
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

import weft_api  # noqa: E402

@pytest.fixture(scope="session")
def http():
    return weft_api.session()


@pytest.fixture(scope="session")
def document():
    return weft_api.fetch_document()


@pytest.fixture(scope="session")
def prereqs(http, document):
    return weft_api.Prerequisites(http, document).setup()


def pytest_terminal_summary(terminalreporter):
    for suite, sizes in weft_api.SIZES.items():
        shown = ", ".join(f"{k}={v}" for k, v in sizes.items() if not isinstance(v, (dict, list)))
        terminalreporter.write_line(f"security[{suite}]: {shown}")


def pytest_sessionfinish(session):
    out = os.environ.get("WEFT_SECURITY_REPORT")
    if out and weft_api.SIZES:
        with open(out, "w") as f:
            json.dump(weft_api.SIZES, f, indent=1, sort_keys=True)
