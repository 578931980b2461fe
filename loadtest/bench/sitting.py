"""One sitting: everything one measurement of a scenario starts, on fresh ground, and tears
down at the end (also on Ctrl-C or a failure): the fleet (through the shared supervisor
`tests/harness/fleet.py`), a private NATS and Redis when asked, the load generator's own servers
(fake upstream, proxy, MCP server) and any extra process a scenario needs.
"""

import contextlib
import shutil
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

    def spawn(self, name, cmd, env=None):
        """Starts a process of the sitting's own (`fleet.Proc`: its own process group, output in
        logs/NAME.log); stopped at the end, last started first."""
        from fleet import Proc
        p = Proc(name, cmd, self.logs / f"{name}.log", env)
        self.procs.append(p)
        return p

    def stop(self, p, timeout=10):
        """SIGTERM, up to `timeout` s to drain, then SIGKILL."""
        p.stop(timeout)
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
            if proc is not None and not proc.alive():
                raise BenchError(f"{what} exited before it was ready (exit {proc.returncode}; "
                                 f"see {proc.log})")
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
        if not r.alive():
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

    def fleet(self, config, arrangement="up", env=None, label="weft", bin_dir=None):
        """A fleet of weft (`tests/harness/fleet.py`) on a fresh database with its own ports and
        NATS/Redis prefixes, from the sitting's binaries, entered into the sitting (so it is torn
        down with it, its database dropped). On the machine's shared NATS and Redis, the
        JetStream streams and Redis keys under its prefix are removed after it stopped."""
        try:
            import fleet as harness
        except ImportError as e:
            raise BenchError(f"tests/harness/fleet.py is missing ({e})") from e
        cfg = self.tmp / f"{label}.toml"
        cfg.write_text(config)
        full_env = dict(self.private_infra())
        full_env.update(env or {})
        f = harness.Fleet(bin_dir or self.bin, arrangement=arrangement,
                          name=f"bench_{self.args.scenario}", config=cfg, env=full_env,
                          logs_dir=self.logs, label=label)
        if not self.nats:
            self.stack.callback(forget_prefix, f.prefix)
        try:
            self.stack.enter_context(f)
        except harness.FleetError as e:
            raise BenchError(f"the fleet did not start: {e}") from e
        f.bench_env = dict(full_env, WEFT_NATS__PREFIX=f.prefix, WEFT_REDIS__PREFIX=f.prefix)
        return f

    def server_pids(self, fleet, services=None):
        """The pids of the fleet's weft processes: under `weft up` the one process whatever
        `services` says; split, those of `services` (gateway, router, executor, …)."""
        return fleet_pids(fleet, services)

    def substrate_url(self, fleet):
        if fleet.arrangement == "up":
            return "http://" + proc_arg(fleet_pids(fleet)[0], "--substrate-listen")
        return "http://" + proc_arg(fleet.procs["weft-substrate"].pid, "--listen")

    def fleet_env(self, fleet):
        """The environment a process of our own needs to join the fleet's NATS and Redis."""
        return dict(fleet.bench_env)

    def api(self, fleet, method, path, body=None):
        """A call to the fleet's API as its admin."""
        return common.api(fleet.url, method, path, fleet.token, body)

    # --- the load generator -------------------------------------------------------------------

    def loadtest(self, scenario, *args, out=None, env=None, exe=None):
        return common.loadtest(self, scenario, *args, out=out, env=env, exe=exe)

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
    if fleet.arrangement == "up":
        return [p.pid for p in fleet.procs.values()]
    return [fleet.procs[f"weft-{name}"].pid for name in services or ["gateway"]]


def proc_arg(pid, flag):
    """The value of `flag` on the command line of a running process."""
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        argv = f.read().decode().split("\0")
    try:
        return argv[argv.index(flag) + 1]
    except (ValueError, IndexError):
        raise BenchError(f"process {pid} was not started with {flag}") from None


def forget_prefix(prefix):
    """Removes what a fleet left under its prefix on the machine's shared NATS and Redis: its
    JetStream streams and its Redis keys (nothing else would ever remove them)."""
    from .nats import delete_streams
    try:
        failed = delete_streams("127.0.0.1", 4222, [f"{prefix.upper()}_RUNS", f"{prefix.upper()}_USAGE"])
        if failed:
            log(f"could not delete the NATS streams {failed}")
    except OSError as e:
        log(f"could not delete the NATS streams of {prefix}: {e}")
    if common.have("redis-cli"):
        keys = subprocess.run(["redis-cli", "--scan", "--pattern", f"{prefix}:*"],
                              capture_output=True, text=True).stdout.split()
        for i in range(0, len(keys), 500):
            subprocess.run(["redis-cli", "del", *keys[i:i + 500]], capture_output=True)
