"""The peers a scenario measures beside weft in the same sitting, each in front of the same
upstream: the floor of one HTTP hop (`weft-loadtest proxy`, a bare hyper proxy; nginx as a
reverse proxy) and the gateways users would pick instead (Portkey's AI gateway, pinned in
`loadtest/peers/portkey`; LiteLLM's proxy, pinned below, where it installs).

`start(s, name, upstream_port)` returns a `Peer`: the base URL to send to (ending in `/v1`), the
model name, the headers the peer needs, and the pids whose CPU counts as the peer's (every
process of it: nginx's master and workers, node, LiteLLM's Python).
"""

import os
import subprocess
import sys
import urllib.request

from .common import ROOT, BenchError, have, log

KNOWN = ("proxy", "nginx", "portkey", "litellm")
PORTKEY_DIR = ROOT / "loadtest" / "peers" / "portkey"
# The newest whose `proxy` extra installs from PyPI alone (from 1.108 on it needs a
# `litellm-proxy` package the index does not have).
LITELLM_VERSION = "1.106.12"
LITELLM_VENV = ROOT / "target" / "peers" / "litellm-venv"
# LiteLLM refuses to start without a master key of some strength; the bench's own.
LITELLM_KEY = "sk-weft-bench-0f3c9a7e5d1b2486"


class Peer:
    def __init__(self, name, url, model, pids, headers=()):
        self.name, self.url, self.model, self.pids, self.headers = name, url, model, pids, list(headers)


def descendants(pid):
    """`pid` and every process under it (nginx's workers, a Node or Python server's children)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for tid in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{tid}/children") as f:
                    todo += [int(c) for c in f.read().split()]
        except OSError:
            pass
    return out


def answers(url, headers=None):
    """True once `url` answers a chat completion with 200."""
    body = b'{"model":"bench-model","messages":[{"role":"user","content":"hi"}]}'
    req = urllib.request.Request(url + "/chat/completions", body, method="POST",
                                 headers={"content-type": "application/json",
                                          "authorization": "Bearer sk-bench", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status == 200
    except OSError:
        return False


def available(name):
    """Why `name` cannot run here, or None when it can."""
    if name == "nginx" and not have("nginx"):
        return "nginx is not installed (apt-get install nginx-light)"
    if name == "portkey" and not have("node", "npm"):
        return "Portkey's gateway needs node and npm"
    return None


def start_all(s, names, upstream_port):
    """Starts each peer of `names` that can run here: (the peers started, {name: why not} for
    the others: not installed, or did not start)."""
    peers, skipped = [], {}
    for name in names:
        why = available(name)
        if not why:
            try:
                peers.append(start(s, name, upstream_port))
                continue
            except BenchError as e:
                why = f"did not start: {str(e).splitlines()[0][:200]}"
        log(f"peer {name} skipped: {why}")
        skipped[name] = why
    return peers, skipped


def start(s, name, upstream_port):
    from fleet import free_ports  # noqa: the shared harness
    up = f"http://127.0.0.1:{upstream_port}"
    if name == "proxy":
        p = s.serve("proxy", "proxy", "--upstream", up)
        return Peer(name, p.ready["base_url"], "bench-model", [p.pid])
    (port,) = free_ports(1)
    url = f"http://127.0.0.1:{port}/v1"
    if name == "nginx":
        proc, headers = nginx(s, port, upstream_port), {}
    elif name == "portkey":
        proc, headers = portkey(s, port), {"x-portkey-provider": "openai",
                                            "x-portkey-custom-host": f"{up}/v1"}
    elif name == "litellm":
        proc, headers = litellm(s, port, upstream_port), {"authorization": f"Bearer {LITELLM_KEY}"}
    else:
        raise BenchError(f"unknown peer {name!r}; known: {', '.join(KNOWN)}")
    s.wait_until(name, lambda: answers(url, headers), proc, 180)
    pids = descendants(proc.pid)
    log(f"{name} at {url} (pids {pids})")
    headers = {"authorization": "Bearer sk-bench", **headers}
    return Peer(name, url, "bench-model", pids, [f"{k}: {v}" for k, v in headers.items()])


def nginx(s, port, upstream_port):
    """nginx as a reverse proxy to the upstream: keep-alive upstream connections, no access log,
    no buffering (streams pass frame by frame), a worker per core."""
    return spawn_nginx(s, "nginx", "auto", f"""
  upstream up {{ server 127.0.0.1:{upstream_port}; keepalive 256; keepalive_requests 1000000; }}
  server {{
    listen 127.0.0.1:{port} backlog=4096;
    location / {{
      proxy_pass http://up;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
    }}
  }}""")


def spawn_nginx(s, name, workers, servers):
    """nginx in the foreground with a scratch directory of its own, `workers` worker processes,
    no access log, and the `servers` block(s) inside `http`."""
    d = s.tmp / name
    d.mkdir()
    user = "user root;" if os.geteuid() == 0 else ""
    (d / "nginx.conf").write_text(f"""
{user}
daemon off;
worker_processes {workers};
pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{ worker_connections 8192; }}
http {{
  access_log off;
  client_body_temp_path {d}/body;
  proxy_temp_path {d}/proxy;
  fastcgi_temp_path {d}/fastcgi;
  uwsgi_temp_path {d}/uwsgi;
  scgi_temp_path {d}/scgi;
  keepalive_requests 1000000;
{servers}
}}
""")
    return s.spawn(name, ["nginx", "-p", str(d), "-c", str(d / "nginx.conf")])


def portkey(s, port):
    """Portkey's gateway at the version `loadtest/peers/portkey` pins, installed on first use.
    Its streamed answers fail here (`TypeError: immutable` from its header update, on Node 20
    and 24 alike): the streaming run through it is reported as failed."""
    start = PORTKEY_DIR / "node_modules" / "@portkey-ai" / "gateway" / "build" / "start-server.js"
    if not start.exists():
        log("installing Portkey's gateway (npm ci in loadtest/peers/portkey)")
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--ignore-scripts"],
                       cwd=PORTKEY_DIR, check=True, stdout=sys.stderr)
    return s.spawn("portkey", ["node", str(start), f"--port={port}", "--headless"],
                   env={"NODE_ENV": "production"})


def litellm(s, port, upstream_port):
    """LiteLLM's proxy, one worker, in a venv of its own (installed on first use)."""
    exe = LITELLM_VENV / "bin" / "litellm"
    if not exe.exists():
        log(f"installing litellm[proxy]=={LITELLM_VERSION} into {LITELLM_VENV}")
        subprocess.run([sys.executable, "-m", "venv", str(LITELLM_VENV)], check=True)
        subprocess.run([str(LITELLM_VENV / "bin" / "pip"), "install", "-q",
                        f"litellm[proxy]=={LITELLM_VERSION}"], check=True, stdout=sys.stderr)
    cfg = s.tmp / "litellm.yaml"
    cfg.write_text(f"""model_list:
  - model_name: bench-model
    litellm_params:
      model: openai/bench-model
      api_base: http://127.0.0.1:{upstream_port}/v1
      api_key: sk-bench
litellm_settings:
  telemetry: false
""")
    return s.spawn("litellm", [str(exe), "--config", str(cfg), "--host", "127.0.0.1",
                               "--port", str(port), "--num_workers", "1"],
                   env={"LITELLM_LOG": "ERROR", "LITELLM_TELEMETRY": "False",
                        "LITELLM_MASTER_KEY": LITELLM_KEY})



def fixed_answer_upstream(s, body):
    """nginx answering every request with `body` (a chat completion, as JSON), the upstream of a
    benchmark whose upstream must not be ours; returns its port."""
    from fleet import free_ports  # noqa: the shared harness
    (port,) = free_ports(1)
    quoted = body.replace("\\", "\\\\").replace("'", "\\'")
    proc = spawn_nginx(s, "nginx-upstream", 1, f"""
  server {{
    listen 127.0.0.1:{port} backlog=4096;
    location / {{
      default_type application/json;
      return 200 '{quoted}';
    }}
  }}""")
    s.wait_until("nginx upstream", lambda: answers(f"http://127.0.0.1:{port}/v1"), proc, 30)
    log(f"nginx upstream at 127.0.0.1:{port} (pid {proc.pid}), a fixed answer")
    return port, proc
