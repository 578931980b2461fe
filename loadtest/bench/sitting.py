"""One sitting: everything one measurement of a scenario starts, on fresh ground, and tears
down at the end (also on Ctrl-C or a failure): the fleet (through the shared supervisor
`tests/harness/fleet.py`), a private NATS and Redis when asked, the load generator's own servers
(fake upstream, proxy, MCP server) and any extra process a scenario needs.
"""

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from . import common
from .common import BenchError, ROOT, log

sys.path.insert(0, str(ROOT / "tests" / "harness"))


class Served:
    """A `weft-loadtest` server (upstream, proxy, mcp-server) and what its ready file said."""

    def __init__(self, proc, ready):
        self.proc, self.pid, self.ready = proc, proc.pid, ready


class Sitting:
    def __init__(self, args, bin_dir, lt, out, label):
        self.args, self.bin, self.lt, self.out, self.label = args, Path(bin_dir), Path(lt), Path(out), label
        self.root = ROOT
        self.logs = self.out / "logs"
        self.procs = []
        self.nats = None  # (host, port, monitoring port) of a private server
        self.redis_port = None
        self.nats_pid = self.redis_pid = None

    def __enter__(self):
        self.out.mkdir(parents=True, exist_ok=True)
        self.logs.mkdir(exist_ok=True)
        self.tmp = Path(tempfile.mkdtemp(prefix="weft-bench-"))
        self.stack = contextlib.ExitStack()
        self.stack.callback(shutil.rmtree, self.tmp, True)
        self.stack.callback(self._stop_procs)
        self.info = common.machine_info()
        self.t0 = common.Machine()
        return self

    def __exit__(self, *exc):
        self.stack.close()
        return False

    @property
    def machine(self):
        return dict(self.info, cpu_steal_pct=common.Machine.since(self.t0)["steal_pct"])

    # --- processes ------------------------------------------------------------------------------

    def spawn(self, name, cmd, env=None, cwd=None):
        """Starts a process of the sitting's own (output in logs/NAME.log); stopped at the end,
        last started first."""
        logf = open(self.logs / f"{name}.log", "ab")
        full_env = dict(os.environ)
        full_env.update(env or {})
        p = subprocess.Popen([str(c) for c in cmd], stdout=logf, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, env=full_env, cwd=cwd or self.tmp)
        logf.close()
        p.bench_name = name
        self.procs.append(p)
        return p

    def stop(self, p, timeout=10):
        """SIGTERM, up to `timeout` s to drain, then SIGKILL."""
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout)
            except subprocess.TimeoutExpired:
                log(f"{p.bench_name} (pid {p.pid}) did not stop in {timeout} s; killing it")
                p.kill()
                p.wait()
        if p in self.procs:
            self.procs.remove(p)

    def _stop_procs(self):
        for p in reversed(list(self.procs)):
            self.stop(p)

    def wait_until(self, what, cond, proc=None, timeout=60):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            v = cond()
            if v:
                return v
            if proc is not None and proc.poll() is not None:
                raise BenchError(f"{what} exited before it was ready (exit {proc.returncode}; "
                                 f"see {self.logs}/{proc.bench_name}.log)")
            time.sleep(0.1)
        raise BenchError(f"{what} was not ready after {timeout} s")

    def serve(self, name, subcommand, *args):
        """`weft-loadtest SUBCOMMAND` on a free port; waits for its ready file."""
        ready = self.tmp / f"{name}.json"
        p = self.spawn(name, [self.lt, subcommand, "--listen", "127.0.0.1:0",
                              "--ready-file", ready, *args])

        def read():
            try:
                return common.read_json(ready)
            except (OSError, ValueError):
                return None
        doc = self.wait_until(f"weft-loadtest {subcommand}", read, p, 30)
        log(f"{name} at {doc.get('base_url') or doc.get('url')} (pid {p.pid})")
        return Served(p, doc)

    # --- infrastructure ---------------------------------------------------------------------

    def private_infra(self):
        """With --private-infra (the default when nats-server and redis-server are installed),
        a NATS server (JetStream in a scratch directory, monitoring on) and a Redis server of the
        sitting's own: their counts and CPU are then weft's alone. Returns the env for weft."""
        if self.nats:
            return self._infra_env
        mode = self.args.private_infra
        if mode == "off" or (mode == "auto" and not common.have("nats-server", "redis-server")):
            return {}
        if not common.have("nats-server", "redis-server", "redis-cli"):
            raise BenchError("--private-infra on needs nats-server, redis-server and redis-cli")
        from fleet import free_ports  # noqa: the shared harness
        nport, nmon, rport = free_ports(3)
        (self.tmp / "nats").mkdir()
        n = self.spawn("nats-server", ["nats-server", "-a", "127.0.0.1", "-p", nport, "-m", nmon,
                                       "-js", "-sd", self.tmp / "nats"])
        r = self.spawn("redis-server", ["redis-server", "--bind", "127.0.0.1", "--port", rport,
                                        "--save", "", "--appendonly", "no", "--dir", self.tmp])

        def up():
            ok = subprocess.run(["redis-cli", "-p", str(rport), "ping"], capture_output=True)
            if ok.returncode != 0:
                return False
            try:
                import urllib.request
                urllib.request.urlopen(f"http://127.0.0.1:{nmon}/varz", timeout=1).read()
                return True
            except OSError:
                return False
        self.wait_until("the private NATS and Redis", up, n, 20)
        if r.poll() is not None:
            raise BenchError("the private redis-server exited")
        self.nats, self.redis_port = ("127.0.0.1", nport, nmon), rport
        self.nats_pid, self.redis_pid = n.pid, r.pid
        self._infra_env = {"WEFT_NATS__URL": f"nats://127.0.0.1:{nport}",
                           "WEFT_REDIS__URL": f"redis://127.0.0.1:{rport}"}
        log(f"private NATS on {nport} (monitoring {nmon}), Redis on {rport}")
        return self._infra_env

    def nats_in_msgs(self):
        import json
        import urllib.request
        with urllib.request.urlopen(f"http://127.0.0.1:{self.nats[2]}/varz", timeout=5) as r:
            return json.load(r)["in_msgs"]

    def redis_commands(self):
        out = subprocess.run(["redis-cli", "-p", str(self.redis_port), "info", "stats"],
                             capture_output=True, text=True).stdout
        for line in out.splitlines():
            if line.startswith("total_commands_processed:"):
                return int(line.split(":")[1])
        return None

    # --- the fleet ------------------------------------------------------------------------------

    def fleet(self, config, arrangement="up", env=None, name=None, services=None, bin_dir=None):
        """A fleet of weft on a fresh database with its own ports and NATS/Redis prefixes, from
        the sitting's binaries, entered into the sitting (so it is torn down with it)."""
        try:
            import fleet as harness
        except ImportError as e:
            raise BenchError(f"tests/harness/fleet.py is missing ({e})") from e
        name = name or f"bench-{self.args.scenario}"
        cfg = self.tmp / f"{name}-{secrets.token_hex(3)}.toml"
        cfg.write_text(config)
        full_env = dict(self.private_infra())
        full_env.update(env or {})
        f = harness.Fleet(str(bin_dir or self.bin), arrangement=arrangement, name=name,
                          config=str(cfg), env=full_env, logs_dir=str(self.logs))
        return self.stack.enter_context(f)

    def server_pids(self, fleet, services=None):
        """The pids of the fleet's weft processes (under `weft up`, the one process)."""
        return fleet_pids(fleet, services)

    def api(self, fleet, method, path, body=None):
        """A call to the fleet's API as its admin."""
        return common.api(fleet.url, method, path, fleet.token, body)

    # --- the load generator -------------------------------------------------------------------

    def loadtest(self, scenario, *args, out=None, env=None):
        return common.loadtest(self, scenario, *args, out=out, env=env)

    def loadtest_compare(self, direct, through, out):
        """`weft-loadtest compare` of two reports in the out dir (names without `.json`)."""
        r = subprocess.run([str(self.lt), "compare", "--direct", self.out / f"{direct}.json",
                            "--through", self.out / f"{through}.json",
                            "--out", self.out / f"{out}.json"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if r.returncode != 0:
            raise BenchError(f"weft-loadtest compare {direct} {through} failed")
        return self.read_json(f"{out}.json")

    def read_json(self, name):
        return common.read_json(self.out / name)

    def write_json(self, name, value):
        common.write_json(self.out / name, value)


def fleet_pids(fleet, services=None):
    """Adapter to the harness's Fleet: the pids of its weft processes."""
    procs = getattr(fleet, "procs", None)
    if procs is None:
        return [fleet.pid]
    pids = []
    for key, p in (procs.items() if isinstance(procs, dict) else enumerate(procs)):
        if services is None or key in services or getattr(p, "name", None) in services:
            pids.append(p.pid)
    return pids
