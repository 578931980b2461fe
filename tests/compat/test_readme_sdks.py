"""The README's agent-framework examples run unchanged against weft.

Each example is the fenced code block that follows an HTML comment
`<!-- readme-example: NAME -->` in README.md. The test substitutes only what a user pastes in:
the origin `http://127.0.0.1:8787` becomes this fleet's, and the token `wft_…` becomes
WEFT_TOKEN. Then it runs the block as a program and compares what it prints with the answer the
README's comment on its last line promises (the mock's `the tool returned: …`).

- `openai-agents` (Python): this venv's interpreter, so the pinned `openai-agents` of
  requirements.txt; no OPENAI_* variable reaches it, as a newcomer has none.
- `vercel-ai` (Node): `ai`, `@ai-sdk/openai` and `zod` pinned in tests/compat/readme-js/
  (package-lock.json), installed by conftest.py's `node_env` fixture.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import JS_DIR

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
ORIGIN = "http://127.0.0.1:8787"
TOKEN = "wft_…"
ANSWER = "the tool returned: "
RUN_TIMEOUT = 120


def readme_example(name):
    """The code of the fenced block right after `<!-- readme-example: NAME -->`."""
    text = README.read_text(encoding="utf-8")
    found = re.findall(
        rf"^<!-- readme-example: {re.escape(name)} -->\n```[a-z]*\n(.*?)^```$",
        text,
        flags=re.M | re.S,
    )
    assert len(found) == 1, f"README.md has {len(found)} blocks marked readme-example: {name}"
    return found[0]


def pasted(code, root_url, token):
    """The block as a user runs it: their fleet's origin and their token, nothing else."""
    for placeholder in (ORIGIN, TOKEN):
        assert placeholder in code, f"the README example no longer uses {placeholder!r}"
    return code.replace(ORIGIN, root_url).replace(TOKEN, token)


def promised(code, comment):
    """The answer the block's last line promises in its comment: `print(x)  # "…"`."""
    last = code.rstrip().splitlines()[-1]
    m = re.search(rf'{re.escape(comment)}\s*"([^"]+)"\s*$', last)
    assert m, f"the example's last line states no answer in a comment: {last!r}"
    assert m.group(1).startswith(ANSWER), m.group(1)
    return m.group(1)


def check(out, expected):
    detail = f"exit {out.returncode}\nstdout:\n{out.stdout[-3000:]}\nstderr:\n{out.stderr[-3000:]}"
    assert out.returncode == 0, detail
    lines = out.stdout.strip().splitlines()
    assert lines and lines[-1] == expected, detail


def test_openai_agents_example(root_url, token, tmp_path):
    code = readme_example("openai-agents")
    expected = promised(code, "#")
    script = tmp_path / "agent.py"
    script.write_text(pasted(code, root_url, token), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    out = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT,
    )
    check(out, expected)


def test_vercel_ai_sdk_example(root_url, token, node_env):
    env, node = node_env
    code = readme_example("vercel-ai")
    expected = promised(code, "//")
    # An ES module on stdin resolves its imports from the working directory: readme-js's
    # node_modules, as the user's own project would.
    out = subprocess.run(
        [str(node), "--input-type=module"],
        input=pasted(code, root_url, token),
        cwd=JS_DIR, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT,
    )
    check(out, expected)
