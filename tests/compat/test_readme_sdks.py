"""The README's agent-framework examples run unchanged against weft.

Each example is the fenced code block that follows an HTML comment
`<!-- readme-example: NAME -->` in README.md. The test substitutes only what a user pastes in:
the origin `http://127.0.0.1:8787` becomes this fleet's, and the token `wft_…` becomes
WEFT_TOKEN. Then it runs the block as a program and compares what it prints with the answer the
README's comment on its last line promises (the mock's `the tool returned: …`).

- `openai-agents` (Python): this venv's interpreter, so the pinned `openai-agents` of
  requirements.txt; no OPENAI_* variable reaches it, as a newcomer has none.
- `vercel-ai` (Node): `ai`, `@ai-sdk/openai` and `zod` pinned in tests/compat/readme-js/
  (package-lock.json), installed there with `npm ci` when node_modules is missing or older than
  the lock (stamp node_modules/.weft-lock-sha256). `ai` wants Node 22+: WEFT_NODE24 (set by
  deploy/local/test.sh), else a `node` on PATH that is 22 or later, else Node 24 from
  tests/mcp/node24.sh.
"""

import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
JS_DIR = Path(__file__).resolve().parent / "readme-js"
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
        pytest.fail(f"no Node 22+ for the Vercel AI SDK example: {out.stderr[-2000:]}")
    return Path(out.stdout)


@pytest.fixture(scope="session")
def node_env():
    """The environment to run Node in, with tests/compat/readme-js's packages installed."""
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
