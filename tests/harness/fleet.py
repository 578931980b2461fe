#!/usr/bin/env python3
"""tests/harness/fleet.py — start a weft fleet on loopback, run something against it, stop it.

deploy/local/test.sh runs its black-box suites through the `run` subcommand below, and
loadtest/bench.py imports this module: keep the API below stable (Python 3.11, stdlib only).
A fleet gets a fresh Postgres database, its own NATS subject prefix and Redis key prefix and free
loopback ports, so fleets share the machine's Postgres, Redis and NATS side by side
(docs: /work/shared/CONVENTIONS.md, Tests). Its processes run in process groups of their own
(a Ctrl-C at the terminal reaches only us, and we stop them with SIGTERM).

Arrangements:
    up     one `weft up` process (gateway, router, substrate, executor, ...)
    split  weft-router, weft-substrate, weft-mcp-bridge, weft-executor, weft-ingress and two
           weft-gateway replicas (the second at `gateway2_url`) sharing an internal JWT secret,
           on a database migrated by `weft migrate`, with an admin token from `weft token create`
    none   no process: only the fresh database (for suites that start their own servers)

API:
    READY_TIMEOUT (WEFT_READY_TIMEOUT, default 60 s), STOP_TIMEOUT (15 s), ROOT, FIXTURES
    class FleetError(Exception)                      start-up failed; the message says why
    free_ports(n) -> list[int]                       n distinct free loopback ports
    show_log(path, lines=60) -> None                 print the tail of a log, framed
    create_database(name) / drop_database(name)      via psql as postgres on 127.0.0.1:5432
    class Proc(name, cmd, log, env=None)             start cmd (argv), output to log
        .name .log .pid .returncode .alive()
        .wait_port(port, timeout=READY_TIMEOUT) -> None
        .wait_ready(ready_file, timeout=READY_TIMEOUT) -> (url, admin_token or None)
            the ready file is what `--ready-file` writes; ready once its url answers /readyz 200
        .stop(timeout=STOP_TIMEOUT) -> int           SIGTERM, then SIGKILL; the exit status
                                                     (128+N when killed by signal N)
    class FakeUpstream(bin_dir, logs_dir=LOGS, fixtures=FIXTURES, log_name="fake-upstream.log")
        context manager; .start() -> self, .url ("http://ADDR"), .proc, .stop() -> bool (clean)
    class RealLlm(run_dir=ROOT/"target/real-llm-run")  llama-server via deploy/local/real-llm.sh
        .start() -> self, .url, .ready_secs, .log, .stop() -> bool
    write_real_llm_config(path, url, model, first_byte_secs=180) -> None
    write_compat_config(path, fake_upstream_url, python=sys.executable, oidc_ports=()) -> None
    oidc_idp_ports(n) -> list[int]                   n free ports below the ephemeral range
        the compat TOML: one provider `fake-<kind>` (alias `via-<kind>`) per HTTP driver kind at
        the fake upstream, the stdio MCP fixture server (run by `python`), loopback MCP servers
    class Fleet(bin_dir, arrangement="up", name="compat", config=None, env=None, logs_dir=LOGS,
                database=True, label=None, ready=True)
        context manager. name: the database `weft_<name>_<hex>` and prefix `<name><hex>`;
        label: log file names (`<logs>/<label>.log`, `split-<proc>.log`) and WEFT_ARRANGEMENT
        (default: "split" for split, else name); config: a TOML file given to every process
        (when it exists); env: extra environment for every process; database: True (a fresh one,
        dropped by stop), False (none given: the processes' own config) or a URL (used as is).
        ready: wait until the gateways' /readyz is 200 (True), or (False, split only) only until
        every process listens, e.g. for a fleet started while its NATS is down
        (env={"WEFT_NATS__URL": ...}); .health then says where each one answers health.
        .start() -> self     raises FleetError (everything started is stopped first)
        .stop() -> bool      every process SIGTERM'd in turn (STOP_TIMEOUT, then SIGKILL); True
                             only when each exited 0; then drops the fresh database (WITH FORCE)
        .url .token .database .database_url .gateway2_url .prefix .log_files .procs (name->Proc)
        .health (split: process name -> {"http": base URL of /healthz and /readyz or None,
                 "grpc": "HOST:PORT" of grpc.health.v1.Health or None})
        .failures (name, status) of the last stop; .suite_env() -> the environment suites read

CLI:
    fleet.py run --arrangement up|split|none --bin-dir DIR [--name N] [--label L] [--config FILE]
                 [--logs DIR] [--env K=V]... [--fake-upstream] [--real-llm] [--python PY]
                 [--timeout SECS] [--tee FILE] -- CMD ARGS...
        starts the fleet (and, with --fake-upstream, a weft-fake-upstream, writing the compat
        config to --config, default <logs>/compat.toml; with --real-llm, llama-server and its
        config, default <logs>/real-llm.toml, WEFT_REAL_LLM=1 for CMD and the tier's timing in
        <logs>/real-llm.timing), runs CMD with the fleet's environment
        (WEFT_BASE_URL=<url>/v1, WEFT_URL, WEFT_TOKEN, WEFT_ARRANGEMENT, WEFT_COMPAT_DATABASE,
        WEFT_COMPAT_LOGS, WEFT_GATEWAY2_URL, WEFT_BIN_DIR, WEFT_FAKE_UPSTREAM; for `none`:
        WEFT_DATABASE_URL, WEFT_BIN_DIR), stops everything and exits non-zero when CMD failed (its
        status; 124 on --timeout) or a process did not exit cleanly (1; which one and the logs'
        tails are printed). --tee copies CMD's stdout to FILE.
    fleet.py run ... --results FILE [--start-step NAME] [--stop-step NAME]
                 --step NAME SHELL_CMD [--step NAME SHELL_CMD]...
        one fleet, several steps: each SHELL_CMD runs with `bash -c` in the fleet's environment;
        the start, each step and the clean stop are recorded in FILE as test.sh's summary lines
        ("ok      NAME (Ns)", "FAILED  NAME (exit N, Ns)").
    On SIGINT/SIGTERM, `run` stops CMD and the fleet and drops the database (exit 130/143).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import secrets
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LOGS = ROOT / "target" / "compat-logs"
FIXTURES = ROOT / "services" / "router" / "tests" / "fixtures"
READY_TIMEOUT = float(os.environ.get("WEFT_READY_TIMEOUT") or 60)
STOP_TIMEOUT = 15.0
REAL_LLM_MODEL = os.environ.get("WEFT_REAL_LLM_ALIAS") or "qwen2.5-coder-0.5b-instruct"
PG_URL = "postgres://postgres@127.0.0.1:5432"
PSQL = ["psql", "-h", "127.0.0.1", "-p", "5432", "-U", "postgres", "-d", "postgres", "-XAtq",
        "-v", "ON_ERROR_STOP=1"]
FAKE_KINDS = {"openai": "openai/v1", "anthropic": "anthropic", "gemini": "gemini/v1beta",
              "deepseek": "deepseek", "ollama": "ollama"}
# Loopback needs no proxy, whatever the environment says.
_HTTP = urllib.request.build_opener(urllib.request.ProxyHandler({}))


# Logs already shown in full by a start-up failure (`run` does not show their tails again).
_REPORTED: set[Path] = set()


class FleetError(Exception):
    """A fleet (or one of its processes) failed to start; the message says why."""


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _rel(path) -> str:
    p = str(path)
    return p[len(str(ROOT)) + 1:] if p.startswith(str(ROOT) + "/") else p


def free_ports(n: int) -> list[int]:
    """n distinct free loopback ports (held open together while chosen, then released)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def oidc_idp_ports(n: int) -> list[int]:
    """n distinct free loopback ports for test identity providers, below Linux's ephemeral range
    (32768+), so the fleet's own port-0 choices made before the providers listen never take them."""
    rng, ports = random.Random(), []
    while len(ports) < n:
        port = rng.randrange(20000, 32000)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        if port not in ports:
            ports.append(port)
    return ports


def show_log(path, lines: int = 60) -> None:
    """Print the last `lines` lines of a log, framed with its name (nothing when it is missing)."""
    try:
        with open(path, "rb") as f:
            tail = f.read().decode(errors="replace").splitlines()[-lines:]
    except OSError:
        return
    print(f"----- last {lines} lines of {_rel(path)} -----", flush=True)
    print("\n".join(tail), flush=True)
    print(f"----- end of {_rel(path)} -----", flush=True)


def _psql(sql: str) -> None:
    subprocess.run([*PSQL, "-c", sql], check=True, stdin=subprocess.DEVNULL)


def create_database(name: str) -> None:
    _psql(f'CREATE DATABASE "{name}"')


def drop_database(name: str) -> None:
    try:
        subprocess.run([*PSQL, "-c", f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'],
                       check=True, stdin=subprocess.DEVNULL, capture_output=True)
    except (OSError, subprocess.CalledProcessError):
        say(f"warning: could not drop database {name}")


def _status(returncode: int) -> int:
    """A shell's view of an exit: 128+N for a process killed by signal N."""
    return 128 - returncode if returncode < 0 else returncode


class Proc:
    """One process we started, in a process group of its own, with its output in `log`."""

    def __init__(self, name: str, cmd, log, env: dict | None = None):
        self.name = name
        self.log = Path(log)
        cmd = [str(c) for c in cmd]
        env = {k: str(v) for k, v in (env or {}).items()}
        shown = [f"{k}=***" if "SECRET" in k else f"{k}={_rel(v)}" for k, v in env.items()]
        shown += [_rel(c) for c in cmd]
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "w") as out:
            out.write("+ " + " ".join(shown) + "\n")
            out.flush()
            self.popen = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL, env={**os.environ, **env},
                                          process_group=0)
        self.pid = self.popen.pid

    @property
    def returncode(self) -> int | None:
        """The exit status once it exited (128+N when killed by signal N), else None."""
        rc = self.popen.poll()
        return None if rc is None else _status(rc)

    def alive(self) -> bool:
        return self.popen.poll() is None

    def _exited_early(self) -> FleetError:
        say(f"{self.name} exited with status {self.returncode} before becoming ready")
        show_log(self.log)
        _REPORTED.add(self.log)
        return FleetError(f"{self.name} exited with status {self.returncode} before becoming ready")

    def _poll(self, probe, timeout: float, what: str):
        """probe() until it returns something other than None (exceptions count as not yet),
        failing early when the process exits and, after `timeout`, with its log tail."""
        deadline = time.monotonic() + timeout
        while True:
            if not self.alive():
                raise self._exited_early()
            try:
                got = probe()
                if got is not None:
                    return got
            except Exception:
                pass
            if time.monotonic() >= deadline:
                say(f"{self.name} {what} after {timeout:g}s")
                show_log(self.log)
                _REPORTED.add(self.log)
                raise FleetError(f"{self.name} {what}")
            time.sleep(0.2)

    def wait_port(self, port: int, timeout: float = READY_TIMEOUT) -> None:
        """Wait until `port` on loopback accepts TCP connections."""
        def probe():
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return True
        self._poll(probe, timeout, f"is not listening on port {port}")

    def wait_ready(self, ready_file, timeout: float = READY_TIMEOUT) -> tuple[str, str | None]:
        """Wait until the ready file holds a URL whose /readyz answers 200: (url, admin_token)."""
        def probe():
            with open(ready_file) as f:
                ready = json.load(f)
            url = ready["url"].rstrip("/")
            with _HTTP.open(url + "/readyz", timeout=2) as resp:
                return (url, ready.get("admin_token") or None) if resp.status == 200 else None
        return self._poll(probe, timeout, "did not become ready (ready file + /readyz)")

    def stop(self, timeout: float = STOP_TIMEOUT) -> int:
        """SIGTERM, up to `timeout` s to exit, then SIGKILL; returns the exit status."""
        was_running = self.popen.poll() is None
        if was_running:
            try:
                self.popen.send_signal(signal.SIGTERM)
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                say(f"process {self.pid} ({self.name}) ignored SIGTERM for {timeout:g}s; killing it")
                self.popen.kill()
                self.popen.wait()
        if was_running:  # whatever it left behind in its group (children it did not reap)
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except OSError:
                pass
        return _status(self.popen.returncode)


class FakeUpstream:
    """weft-fake-upstream replaying FIXTURES on a free loopback port; `url` once started."""

    def __init__(self, bin_dir, logs_dir=LOGS, fixtures=FIXTURES, log_name="fake-upstream.log"):
        self.bin_dir, self.fixtures = Path(bin_dir), Path(fixtures)
        self.log = Path(logs_dir) / log_name
        self.url: str | None = None
        self.proc: Proc | None = None

    def start(self, timeout: float = READY_TIMEOUT) -> "FakeUpstream":
        self.proc = Proc("weft-fake-upstream", [self.bin_dir / "weft-fake-upstream", "--fixtures",
                                                self.fixtures, "--listen", "127.0.0.1:0"], self.log)
        def probe():
            m = re.search(r"^listening on (http://\S+)", self.log.read_text(errors="replace"), re.M)
            return m.group(1) if m else None
        try:
            self.url = self.proc._poll(probe, timeout, "printed no 'listening on' line")
        except FleetError:
            self.proc.stop()
            raise
        print(f"weft-fake-upstream: {self.url} (fixtures {_rel(self.fixtures)})", flush=True)
        return self

    def stop(self) -> bool:
        """Stop it; True when it exited cleanly (status 0) on SIGTERM."""
        if self.proc is None:
            return True
        proc, self.proc = self.proc, None
        status = proc.stop()
        if status != 0:
            say(f"weft-fake-upstream did not shut down cleanly on SIGTERM (exit status {status})")
            show_log(self.log, 20)
        return status == 0

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


def write_compat_config(path, fake_upstream_url: str, python: str = sys.executable,
                        oidc_ports=()) -> None:
    """The compat suites' config: the mock provider and its aliases stay; one provider per HTTP
    driver kind (alias `via-<kind>`) at the fake upstream; the stdio MCP fixture server; and one
    trusted OIDC issuer per port in `oidc_ports` (tenant `oidc-<i>`, audience `urn:weft:tenant-<i>`
    for i = a, b, ...), which tests/compat/test_oidc.py starts there."""
    q = json.dumps  # a JSON string is a TOML basic string
    lines = ["# Written by tests/harness/fleet.py: one provider per driver kind, all served by",
             f"# weft-fake-upstream at {fake_upstream_url}. The mock provider and its aliases stay."]
    for kind, prefix in FAKE_KINDS.items():
        lines += ["", f"[router.providers.fake-{kind}]", f"kind = {q(kind)}",
                  f"base_url = {q(f'{fake_upstream_url}/{prefix}')}", 'models = ["m"]']
    lines += ["", "[router.aliases]"]
    lines += [f'via-{kind} = ["fake-{kind}/m"]' for kind in FAKE_KINDS]
    lines += ["", "# The MCP fixture server over stdio: only an operator (this file) may declare one.",
              "[substrate.mcp_servers.fixture]", 'transport = "stdio"',
              'description = "tests/mcp/fixture_server.py over stdio"', f"command = {q(str(python))}",
              f"args = [{q(str(ROOT / 'tests/mcp/fixture_server.py'))}, \"stdio\"]",
              "", "# The tests' HTTP MCP servers listen on loopback.", "[mcp_bridge]",
              'private_exempt = ["127.0.0.1/32"]',
              "", "# So do their A2A peers (tests/compat/test_a2a.py).", "[executor]",
              'http_private_exempt = ["127.0.0.1/32"]']
    if oidc_ports:
        lines += ["", "# Test identity providers (tests/compat/readme-js/oidc-idp.mjs): a rotation is",
                  "# picked up within a second.", "[auth]", "oidc_jwks_min_refresh_secs = 1"]
    for i, port in zip("abcdefgh", oidc_ports):
        lines += ["", f"[auth.oidc.idp-{i}]", f'tenant = "oidc-{i}"',
                  f'issuer = "http://127.0.0.1:{port}"', f'audiences = ["urn:weft:tenant-{i}"]',
                  'subject_prefix = "sso:"', "leeway_secs = 0"]
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text("\n".join(lines) + "\n")


class RealLlm:
    """llama-server with a small real model, through deploy/local/real-llm.sh (`start`, `stop`,
    with a pidfile of its own in run_dir); `url` once started, `ready_secs` it took."""

    def __init__(self, run_dir=ROOT / "target" / "real-llm-run"):
        self.run_dir = Path(run_dir)
        self.log = self.run_dir / "llama-server.log"
        self.url: str | None = None
        self.ready_secs = 0.0
        self._up = False

    def _script(self, *args, **kw) -> subprocess.CompletedProcess:
        env = {**os.environ, "WEFT_REAL_LLM_RUN_DIR": str(self.run_dir)}
        return subprocess.run([ROOT / "deploy/local/real-llm.sh", *args], env=env,
                              stdin=subprocess.DEVNULL, text=True, **kw)

    def start(self) -> "RealLlm":
        t0 = time.monotonic()
        self._script("stop")  # a server left behind by a killed run (same pidfile) goes first
        self._up = True
        # stderr (progress, and the ~6 minute build on a cold cache) goes to the console.
        out = self._script("start", stdout=subprocess.PIPE)
        if out.returncode != 0:
            say("deploy/local/real-llm.sh start failed")
            show_log(self.log, 40)
            raise FleetError("llama-server did not start")
        urls = re.findall(r"^WEFT_REAL_LLM_URL=(\S+)", out.stdout, re.M)
        if not urls or not urls[-1].startswith("http://"):
            say(f"deploy/local/real-llm.sh start printed no WEFT_REAL_LLM_URL line: {out.stdout}")
            raise FleetError("llama-server gave no URL")
        self.url, self.ready_secs = urls[-1], time.monotonic() - t0
        print(f"real-llm: llama-server at {self.url}, up after {self.ready_secs:.0f}s", flush=True)
        return self

    def stop(self) -> bool:
        """Stop the server this object started; True when real-llm.sh stop succeeded."""
        if not self._up:
            return True
        self._up = False
        return self._script("stop").returncode == 0


def write_real_llm_config(path, url: str, model: str, first_byte_secs: int = 180) -> None:
    """Providers `llama-openai` and `llama-anthropic` (aliases `real-openai`, `real-anthropic`)
    in front of llama-server at url. A non-streamed answer's headers come only once the whole
    answer is generated: on a busy 2-core machine that takes longer than the default first-byte
    timeout, hence first_byte_secs (as tests/compat/test_real_llm.py's client timeout)."""
    q = json.dumps
    lines = [f"# Written by tests/harness/fleet.py: the real-model tier, llama-server at {url}."]
    for name, kind, base in (("llama-openai", "openai", f"{url}/v1"),
                             ("llama-anthropic", "anthropic", url)):
        lines += [f"[router.providers.{name}]", f"kind = {q(kind)}", f"base_url = {q(base)}",
                  f"models = [{q(model)}]", f"first_byte_timeout_secs = {first_byte_secs}", ""]
    lines += ["[router.aliases]", f"real-openai = [{q('llama-openai/' + model)}]",
              f"real-anthropic = [{q('llama-anthropic/' + model)}]"]
    Path(path).write_text("\n".join(lines) + "\n")


class Fleet:
    """One arrangement of weft on loopback (see the module docstring)."""

    stop_timeout = STOP_TIMEOUT

    def __init__(self, bin_dir, arrangement: str = "up", name: str = "compat", config=None,
                 env: dict | None = None, logs_dir=LOGS, database: bool | str = True,
                 label: str | None = None, grpc: bool = False, ready: bool = True):
        if arrangement not in ("up", "split", "none"):
            raise ValueError(f"arrangement must be up, split or none, got {arrangement!r}")
        self.bin_dir = Path(bin_dir).resolve()
        self.arrangement, self.name = arrangement, name
        self.label = label or ("split" if arrangement == "split" else name)
        self.config = Path(config) if config else None
        self.extra_env = dict(env or {})
        # The public gRPC API (gateway.grpc_listen), off unless asked: binaries older than it
        # refuse the key (A/B benchmarks start them through this class).
        self.grpc = grpc
        self.wait_ready = ready
        self.health: dict[str, dict[str, str | None]] = {}
        self.logs = Path(logs_dir)
        self.want_database = database
        self.prefix = re.sub(r"[^a-z0-9]", "", name.lower()) + secrets.token_hex(4)
        self.database: str | None = None
        self.database_url: str | None = None
        self._created_database = False
        self.url: str | None = None
        self.token: str | None = None
        self.gateway2_url: str | None = None
        self.grpc_addr: str | None = None
        self.log_files: list[Path] = []
        self.procs: dict[str, Proc] = {}
        self._stop_order: list[str] = []
        self.failures: list[tuple[str, int]] = []

    # -- start ---------------------------------------------------------------------------------

    def _cfg(self) -> list:
        return ["--config", self.config] if self.config and self.config.is_file() else []

    def _spawn(self, name: str, log: Path, cmd: list, env: dict | None = None) -> Proc:
        proc = Proc(name, cmd, log, {**self.extra_env, **(env or {})})
        self.procs[name] = proc
        return proc

    def start(self) -> "Fleet":
        """Start the fleet and wait until it is ready; on failure stop what started and raise."""
        self.logs.mkdir(parents=True, exist_ok=True)
        try:
            if self.want_database is True:
                self.database = "weft_" + re.sub(r"[^a-z0-9_]", "_", self.name.lower()) + "_" \
                    + secrets.token_hex(6)
                self.database_url = f"{PG_URL}/{self.database}"
                self._created_database = True
                try:
                    create_database(self.database)
                except (OSError, subprocess.CalledProcessError) as e:
                    raise FleetError(f"could not create database {self.database}: {e}") from e
            elif self.want_database:
                self.database_url = str(self.want_database)
                self.database = self.database_url.rsplit("/", 1)[-1].split("?")[0]
            if self.arrangement == "up":
                self._start_up()
            elif self.arrangement == "split":
                self._start_split()
        except BaseException:
            self._teardown()
            raise
        return self

    def _start_up(self) -> None:
        gport, rport, sport, grpc = free_ports(4)
        self.grpc_addr = f"127.0.0.1:{grpc}" if self.grpc else None
        log, ready = self.logs / f"{self.label}.log", self.logs / f"{self.label}.ready.json"
        ready.unlink(missing_ok=True)
        db = ["--database-url", self.database_url] if self.database_url else []
        # The bootstrap token goes to the logs folder, never over a developer's .weft/admin-token.
        self.log_files = [log]
        proc = self._spawn(f"weft up ({self.label})", log, [
            self.bin_dir / "weft", "up", *self._cfg(), "--listen", f"127.0.0.1:{gport}",
            "--router-listen", f"127.0.0.1:{rport}", "--substrate-listen", f"127.0.0.1:{sport}",
            *db, "--ready-file", ready], {
            "WEFT_BOOTSTRAP__TOKEN_FILE": self.logs / f"{self.label}.admin-token",
            **({"WEFT_GATEWAY__GRPC_LISTEN": self.grpc_addr} if self.grpc_addr else {}),
            "WEFT_NATS__PREFIX": self.prefix, "WEFT_REDIS__PREFIX": self.prefix})
        self._stop_order = [proc.name]
        self.url, self.token = proc.wait_ready(ready)
        if not self.token:
            raise FleetError(f"the ready file of {proc.name} has no admin_token")

    def _start_split(self) -> None:
        if not self.database_url:
            raise FleetError("the split arrangement needs a database")
        gport, rport, sport, bport, g2port, iport, grpc, rmport, emport = free_ports(9)
        self.grpc_addr = f"127.0.0.1:{grpc}" if self.grpc else None
        L = {p: self.logs / f"{self.label}-{p}.log" for p in (
            "router", "substrate", "mcp-bridge", "executor", "ingress", "gateway", "gateway2")}
        bins, cfg, url = self.bin_dir, self._cfg(), self.database_url
        self.log_files = [L[p] for p in ("gateway", "gateway2", "executor", "substrate", "router",
                                         "mcp-bridge", "ingress")]
        for step, cmd in (("migrate", ["migrate"]),
                          ("token", ["token", "create", "--admin", "--name", self.name])):
            out = subprocess.run([bins / "weft", *cmd, "--database-url", url], text=True,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 stdin=subprocess.DEVNULL)
            (self.logs / f"{self.label}-{step}.log").write_text(out.stdout + out.stderr
                                                                if step == "migrate" else out.stderr)
            if out.returncode != 0 or (step == "token" and not out.stdout.startswith("wft_")):
                say(f"weft {' '.join(cmd)} failed" + (" or printed no wft_ token on stdout"
                                                      if step == "token" else ""))
                show_log(self.logs / f"{self.label}-{step}.log")
                raise FleetError(f"weft {cmd[0]} failed")
            if step == "token":
                self.token = out.stdout.strip()
        secret = {"WEFT_AUTH__INTERNAL_JWT_SECRET": secrets.token_hex(32)}
        prefixes = {"WEFT_NATS__PREFIX": self.prefix, "WEFT_REDIS__PREFIX": self.prefix}
        at = lambda port: f"http://127.0.0.1:{port}"  # noqa: E731
        # Where each process answers health (every port is bound before its dependencies are).
        self.health = {
            "weft-router": {"http": at(rmport), "grpc": f"127.0.0.1:{rport}"},
            "weft-substrate": {"http": None, "grpc": f"127.0.0.1:{sport}"},
            "weft-mcp-bridge": {"http": None, "grpc": f"127.0.0.1:{bport}"},
            "weft-executor": {"http": at(emport), "grpc": None},
            "weft-ingress": {"http": at(iport), "grpc": None},
            "weft-gateway": {"http": at(gport), "grpc": self.grpc_addr},
            "weft-gateway-2": {"http": at(g2port), "grpc": None},
        }
        self._spawn("weft-router", L["router"], [bins / "weft-router", *cfg, "--listen",
                    f"127.0.0.1:{rport}", "--metrics-listen", f"127.0.0.1:{rmport}"],
                    secret).wait_port(rport)
        self._spawn("weft-substrate", L["substrate"], [
            bins / "weft-substrate", *cfg, "--listen", f"127.0.0.1:{sport}", "--database-url", url],
            {**secret, "WEFT_NATS__PREFIX": self.prefix,
             "WEFT_SUBSTRATE__ROUTER_URL": at(rport)}).wait_port(sport)
        self._spawn("weft-mcp-bridge", L["mcp-bridge"], [
            bins / "weft-mcp-bridge", *cfg, "--listen", f"127.0.0.1:{bport}", "--substrate-url",
            at(sport)], secret).wait_port(bport)
        self._spawn("weft-executor", L["executor"], [
            bins / "weft-executor", *cfg, "--router-url", at(rport), "--substrate-url", at(sport),
            "--metrics-listen", f"127.0.0.1:{emport}"],
            {**secret, "WEFT_DATABASE__URL": url, **prefixes,
             "WEFT_EXECUTOR__MCP_BRIDGE_URL": at(bport)}).wait_port(emport)
        # The scheduler as its own replica (the gateways serve the webhook receiver).
        self._spawn("weft-ingress", L["ingress"], [
            bins / "weft-ingress", *cfg, "--listen", f"127.0.0.1:{iport}", "--substrate-url",
            at(sport), "--database-url", url], {**secret, **prefixes}).wait_port(iport)
        # Two gateway replicas on the same database: MCP sessions continue across replicas.
        for name, port, key in (("weft-gateway", gport, "gateway"),
                                ("weft-gateway-2", g2port, "gateway2")):
            ready = self.logs / f"{self.label}-{key}.ready.json"
            ready.unlink(missing_ok=True)
            proc = self._spawn(name, L[key], [
                bins / "weft-gateway", *cfg, "--listen", f"127.0.0.1:{port}", "--router-url",
                at(rport), "--database-url", url, "--ready-file", ready],
                {**secret, "WEFT_GATEWAY__SUBSTRATE_URL": at(sport), **prefixes,
                 # The public gRPC API on the first replica only (one port each).
                 **({"WEFT_GATEWAY__GRPC_LISTEN": self.grpc_addr}
                    if key == "gateway" and self.grpc_addr else {})})
            if self.wait_ready:
                ready_url, _ = proc.wait_ready(ready)
            else:
                proc.wait_port(port)
                ready_url = at(port)
            self.url = self.url or ready_url
        self.gateway2_url = at(g2port)
        self._stop_order = ["weft-gateway", "weft-gateway-2", "weft-executor", "weft-ingress",
                            "weft-mcp-bridge", "weft-substrate", "weft-router"]

    # -- stop ----------------------------------------------------------------------------------

    def _teardown(self) -> None:
        """After a failed start: stop everything without judging, drop the database."""
        for proc in reversed(list(self.procs.values())):
            proc.stop(self.stop_timeout)
        self.procs.clear()
        self._drop()

    def _drop(self) -> None:
        if self._created_database and self.database:
            self._created_database = False
            drop_database(self.database)

    def stop(self) -> bool:
        """Stop every process in turn; True only when each exited 0 on SIGTERM. Drops the
        fresh database either way."""
        self.failures = []
        order = [n for n in self._stop_order if n in self.procs]
        order += [n for n in reversed(list(self.procs)) if n not in order]
        for name in order:
            status = self.procs.pop(name).stop(self.stop_timeout)
            if status != 0:
                say(f"{name} did not shut down cleanly on SIGTERM (exit status {status})")
                self.failures.append((name, status))
        self._drop()
        return not self.failures

    def dead(self) -> list[str]:
        """The processes of the fleet that are no longer running."""
        return [name for name, proc in self.procs.items() if not proc.alive()]

    def suite_env(self) -> dict[str, str]:
        """What the black-box suites read (tests/compat, tests/security, web/e2e, ...)."""
        env = {"WEFT_BIN_DIR": str(self.bin_dir)}
        if self.arrangement == "none":
            if self.database_url:
                env["WEFT_DATABASE_URL"] = self.database_url
            return env
        return {**env, "WEFT_BASE_URL": f"{self.url}/v1", "WEFT_URL": self.url,
                "WEFT_TOKEN": self.token or "", "WEFT_ARRANGEMENT": self.label,
                "WEFT_COMPAT_DATABASE": self.database or "",
                "WEFT_COMPAT_LOGS": ":".join(map(str, self.log_files)),
                "WEFT_GATEWAY2_URL": self.gateway2_url or "",
                "WEFT_GRPC_ADDR": self.grpc_addr or ""}

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


# -- the `run` subcommand ------------------------------------------------------------------------


class _Interrupted(Exception):
    def __init__(self, status: int):
        super().__init__(status)
        self.status = status


def _on_signal(signum, _frame):
    raise _Interrupted(128 + signum)


def _run_cmd(cmd, env: dict, timeout: float | None, tee: Path | None) -> int:
    """Run cmd (argv) in the foreground: its exit status; 124 when it outlived `timeout` (then
    it gets SIGTERM, and SIGKILL 10 s later), as `timeout --foreground` does."""
    child = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE if tee else None)
    expired = threading.Event()

    def expire():
        expired.set()
        say(f"timed out after {timeout:g}s: {shlex.join(map(str, cmd))[:200]}")
        _end(child)

    watchdog = threading.Timer(timeout, expire) if timeout else None
    if watchdog:
        watchdog.daemon = True
        watchdog.start()
    try:
        if tee:
            with open(tee, "wb") as out:  # a line at a time, as `tee` would
                for line in child.stdout:
                    sys.stdout.buffer.write(line)
                    sys.stdout.flush()
                    out.write(line)
        child.wait()
    finally:
        if watchdog:
            watchdog.cancel()
        if child.poll() is None:  # interrupted: stop it before the fleet goes
            _end(child)
    return 124 if expired.is_set() else _status(child.returncode)


def _end(child: subprocess.Popen) -> None:
    """SIGTERM a foreground command, SIGKILL when it is still there 10 s later."""
    try:
        child.terminate()
        child.wait(10)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()
    except OSError:
        pass


def _record(results: Path | None, name: str, status: int, seconds: float) -> None:
    if results is None:
        return
    line = (f"ok      {name} ({seconds:.0f}s)" if status == 0
            else f"FAILED  {name} (exit {status}, {seconds:.0f}s)")
    with open(results, "a") as f:
        f.write(line + "\n")


def _banner(name: str) -> None:
    print(f"\n==> {name}", flush=True)


def cmd_run(args) -> int:
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if bool(cmd) == bool(args.step):
        say("fleet.py run: give either `-- CMD ARGS...` or one or more --step NAME SHELL_CMD")
        return 2
    logs = Path(args.logs)
    logs.mkdir(parents=True, exist_ok=True)
    results = Path(args.results) if args.results else None
    label = args.label or ("split" if args.arrangement == "split" else args.name)
    fleet = Fleet(args.bin_dir, args.arrangement, args.name, args.config,
                  dict(kv.split("=", 1) for kv in args.env), logs, label=label,
                  grpc=args.grpc or args.fake_upstream)
    fake = llm = None
    signal.signal(signal.SIGTERM, _on_signal)
    status, started, t0 = 0, False, time.monotonic()
    if args.start_step:
        _banner(args.start_step)
    try:
        try:
            if args.fake_upstream:
                fleet.config = Path(args.config or logs / "compat.toml")
                fleet.config.unlink(missing_ok=True)
                fake = FakeUpstream(args.bin_dir, logs, log_name=f"fake-upstream-{label}.log")
                fake.start()
                oidc_ports = oidc_idp_ports(2)
                write_compat_config(fleet.config, fake.url, args.python, oidc_ports)
            if args.real_llm:
                llm = RealLlm()
                llm.start()
                fleet.config = Path(args.config or logs / "real-llm.toml")
                write_real_llm_config(fleet.config, llm.url, REAL_LLM_MODEL)
            fleet.start()
            started = True
        except FleetError as e:
            say(f"fleet.py: {e}")
            status = 1
        if args.start_step:
            _record(results, args.start_step, status, time.monotonic() - t0)
        if not started:
            return status
        env = {**os.environ, **fleet.suite_env()}
        if fake:
            env["WEFT_FAKE_UPSTREAM"] = fake.url
            env["WEFT_OIDC_PORTS"] = ",".join(map(str, oidc_ports))
        if llm:
            env["WEFT_REAL_LLM"] = "1"
        if cmd:
            where = fleet.url or fleet.database_url
            print(f"fleet[{label}]: running {shlex.join(cmd)[:160]} against {where}", flush=True)
            status = _run_cmd(cmd, env, args.timeout, Path(args.tee) if args.tee else None)
        for name, shell in args.step:
            _banner(name)
            t1, dead = time.monotonic(), fleet.dead()
            if dead:
                say(f"the fleet's {', '.join(dead)} is not running")
                step_status = 1
            else:
                step_status = _run_cmd(["bash", "-c", shell], env, args.timeout, None)
            _record(results, name, step_status, time.monotonic() - t1)
            status = status or step_status
    except (_Interrupted, KeyboardInterrupt) as e:
        status = e.status if isinstance(e, _Interrupted) else 130
        say("fleet.py: interrupted; stopping the fleet")
    finally:
        # Cleanup is bounded (STOP_TIMEOUT a process): let it finish.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if started and args.stop_step:
            _banner(args.stop_step)
        t1 = time.monotonic()
        clean = fleet.stop()
        if fake is not None:
            clean = fake.stop() and clean
        if started and args.stop_step:
            _record(results, args.stop_step, 0 if clean else 1, time.monotonic() - t1)
        if status != 0 or not clean:
            for log in fleet.log_files + ([llm.log] if llm and llm.url else []):
                if log not in _REPORTED:
                    show_log(log, 40)
        if llm is not None:
            clean = llm.stop() and clean
            if llm.url:  # the summary's "real LLM tier:" line
                total = time.monotonic() - t0
                (logs / "real-llm.timing").write_text(
                    f"{total:.0f}s (llama-server ready in {llm.ready_secs:.0f}s,"
                    f" weft up + tests {total - llm.ready_secs:.0f}s)\n")
        status = status or (0 if clean else 1)
    return status


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="fleet.py", description=__doc__.split("\n", 1)[0])
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="start a fleet, run a command against it, stop it")
    r.add_argument("--arrangement", choices=["up", "split", "none"], default="up")
    r.add_argument("--bin-dir", default=os.environ.get("WEFT_BIN_DIR") or ROOT / "target/debug")
    r.add_argument("--name", default="compat", help="database weft_<name>_<hex>, prefix <name><hex>")
    r.add_argument("--label", help="log names and WEFT_ARRANGEMENT (default: split or the name)")
    r.add_argument("--config", help="a TOML file for every process (written with --fake-upstream)")
    r.add_argument("--logs", default=LOGS, help="where process logs go")
    r.add_argument("--env", action="append", default=[], metavar="K=V",
                   help="extra environment for the fleet's processes")
    r.add_argument("--fake-upstream", action="store_true",
                   help="start weft-fake-upstream and write the compat config to --config "
                        "(and turn on the public gRPC API, as --grpc)")
    r.add_argument("--grpc", action="store_true",
                   help="turn on the gateway's public gRPC API (WEFT_GRPC_ADDR for CMD)")
    r.add_argument("--real-llm", action="store_true",
                   help="start llama-server (deploy/local/real-llm.sh), write its config to "
                        "--config (default <logs>/real-llm.toml), give CMD WEFT_REAL_LLM=1")
    r.add_argument("--python", default=sys.executable,
                   help="the Python that runs the stdio MCP fixture server (compat config)")
    r.add_argument("--timeout", type=float, help="seconds for each command before SIGTERM")
    r.add_argument("--tee", help="also copy the command's stdout to this file")
    r.add_argument("--results", help="append test.sh summary lines for the steps to this file")
    r.add_argument("--start-step", help="record the fleet's start as this step")
    r.add_argument("--stop-step", help="record the fleet's clean stop as this step")
    r.add_argument("--step", nargs=2, action="append", default=[], metavar=("NAME", "SHELL_CMD"))
    r.add_argument("cmd", nargs=argparse.REMAINDER)
    args = p.parse_args(argv)
    return cmd_run(args)


if __name__ == "__main__":
    sys.exit(main())
