"""What every scenario needs: running `weft-loadtest`, reading CPU time and memory from /proc,
talking to weft's API and to Postgres, writing markdown, and (`Meter`, callgrind) counting what
a stretch of work costs weft and its infrastructure.

CPU times come from `/proc/<pid>/stat` (user + system, all threads) and `/proc/stat` (the
machine), in clock ticks; both are cumulative, so a scenario reads them before and after what it
measures and divides the difference by the work done (requests, runs, frames, deliveries).
"""

import datetime
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HZ = os.sysconf("SC_CLK_TCK")
# What `tests/harness/fleet.py` starts for the split arrangement.
SPLIT_BINARIES = ["weft", "weft-gateway", "weft-router", "weft-substrate", "weft-executor",
                  "weft-ingress", "weft-mcp-bridge"]


class BenchError(Exception):
    """A benchmark that cannot go on; the message says why (and the runner tears down)."""


def log(msg):
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


# --- time and numbers ---------------------------------------------------------------------------

def seconds(text):
    """`10s`, `500ms`, `2m`, `1h` or a bare number of seconds, as float seconds."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(ms|s|m|h)?\s*", str(text))
    if not m:
        raise ValueError(f"not a duration: {text!r} (say 10s, 500ms, 2m)")
    return float(m.group(1)) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600, None: 1}[m.group(2)]


def duration(text):
    """An argparse type: a duration as weft-loadtest takes it (`10s`, `500ms`, `2m`), checked."""
    import argparse
    try:
        seconds(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


def int_list(text):
    """`16,64` or `16 64` as [16, 64]."""
    items = [x for x in re.split(r"[,\s]+", str(text).strip()) if x]
    try:
        return [int(x) for x in items]
    except ValueError:
        raise ValueError(f"not a list of whole numbers: {text!r}") from None


def word_list(text):
    return [x for x in re.split(r"[,\s]+", str(text).strip()) if x]


def rnd(x, digits=2):
    return None if x is None else round(x, digits)


def ms(us, digits=2):
    """Microseconds as a milliseconds cell."""
    return "n/a" if us is None else f"{round(us / 1000, digits):g}"


def cell(v):
    if v is None:
        return "n/a"
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def table(header, rows, align=None):
    """A markdown table; `align` is one of `l`/`r` per column (numbers right by default)."""
    align = align or ["l"] + ["r"] * (len(header) - 1)
    out = ["| " + " | ".join(header) + " |",
           "|" + "|".join("---:" if a == "r" else "---" for a in align) + "|"]
    out += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(out)


def get(d, path, default=None):
    """`get(report, "latency_us.p99")`: a dotted path into nested dicts, None when missing."""
    for key in path.split("."):
        if not isinstance(d, dict) or d.get(key) is None:
            return default
        d = d[key]
    return d


def kinds(report, count="failures", by="failure_kinds"):
    n = report.get(count) or 0
    if not n:
        return "0"
    return f"{n} (" + ", ".join(f"{k} {v}" for k, v in (report.get(by) or {}).items()) + ")"


# --- /proc ------------------------------------------------------------------------------------

def proc_ticks(pid):
    """User + system clock ticks the process (all its threads) has used so far; 0 when gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            rest = f.read().rsplit(")", 1)[1].split()
        return int(rest[11]) + int(rest[12])
    except (OSError, IndexError, ValueError):
        return 0


def ticks_of(pids):
    return sum(proc_ticks(p) for p in pids if p)


def cpu_ms(pids):
    return ticks_of(pids) * 1000 // HZ


def pids_named(name):
    """Every process whose command name is `name` (as `pgrep -x`)."""
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/comm") as f:
                    if f.read().strip() == name:
                        out.append(int(d))
            except OSError:
                pass
    return out


def postgres_pids(database=None):
    """Every `postgres` process; with `database`, backends of other databases left out (the
    server's own processes, WAL writer, checkpointer, …, stay in: they work for every database)."""
    pids = pids_named("postgres")
    if database is None:
        return pids
    keep = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                title = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        # A backend's title: "postgres: <cluster>: <user> <database> <host>(<port>) <state>".
        is_backend = re.search(r" \S+\(\d+\) ", title) or "[local]" in title
        if is_backend and f" {database} " not in title:
            continue
        keep.append(pid)
    return keep


class Machine:
    """A reading of /proc/stat: total, steal and idle (idle + iowait) ticks over all cores."""

    def __init__(self):
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:9]]
        self.total, self.steal, self.idle = sum(v), v[7], v[3] + v[4]
        self.at = time.monotonic()

    @staticmethod
    def since(a):
        """{busy_pct, busy_cores, steal_pct, wall_s} between reading `a` and now."""
        b = Machine()
        t = b.total - a.total
        if t <= 0:
            return {"busy_pct": None, "busy_cores": None, "steal_pct": 0.0, "wall_s": b.at - a.at}
        return {"busy_pct": round(100 * (t - (b.idle - a.idle)) / t, 1),
                "busy_cores": round((t - (b.idle - a.idle)) / t * os.cpu_count(), 2),
                "steal_pct": round(100 * (b.steal - a.steal) / t, 1),
                "wall_s": round(b.at - a.at, 3)}


def status_kib(pid, field):
    """`VmRSS`, `RssAnon`, … of /proc/<pid>/status in KiB; None when gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def loadavg():
    with open("/proc/loadavg") as f:
        return f.read().split()[:3]


def compiler_running():
    return bool(pids_named("rustc") or pids_named("cargo"))


def machine_info():
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), "")
    except OSError:
        pass
    git = subprocess.run(["git", "-C", str(ROOT), "describe", "--always", "--dirty", "--abbrev=7"],
                         capture_output=True, text=True).stdout.strip() or "unknown"
    return {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
            "git": git, "cpu": cpu, "cores": os.cpu_count(), "kernel": platform.release()}


# --- the load generator ---------------------------------------------------------------------------

def loadtest(ctx, scenario, *args, out=None, env=None, exe=None):
    """Runs `weft-loadtest SCENARIO ARGS… --out OUT` and returns the report it wrote. Secrets
    travel in `env` (WEFT_LOADTEST_TOKEN, …), never on the command line (argv is visible to ps).
    With `exe` (a generator of one scenario, such as `weft-mcp-profile`), runs `EXE ARGS…`
    instead; `scenario` only names it in errors."""
    cmd = [str(ctx.lt), scenario] if exe is None else [str(exe)]
    cmd += [str(a) for a in args]
    if out is not None:
        cmd += ["--out", str(out)]
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("WEFT_LOADTEST_")}
    full_env.update(env or {})
    r = subprocess.run(cmd, env=full_env, stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    if r.returncode != 0:
        raise BenchError(f"{os.path.basename(cmd[0])} {scenario} failed (exit {r.returncode}): "
                         + " ".join(cmd[1:]))
    if out is None:
        return None
    with open(out) as f:
        return json.load(f)


def read_json(path):
    with open(path) as f:
        return json.load(f)


def write_json(path, value):
    with open(path, "w") as f:
        json.dump(value, f, indent=2)
        f.write("\n")


# --- weft's API ---------------------------------------------------------------------------------

def api(url, method, path, token, body=None, ok=(200, 201, 202, 204)):
    """One JSON call to weft; raises with weft's answer when the status is not in `ok`."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url.rstrip("/") + path, data=data, method=method)
    req.add_header("authorization", f"Bearer {token}")
    if data is not None:
        req.add_header("content-type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            status, text = r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        status, text = e.code, e.read().decode(errors="replace")
    except OSError as e:
        raise BenchError(f"{method} {path} failed: {e}") from e
    if status not in ok:
        raise BenchError(f"{method} {path} answered {status}: {text[:500]}")
    return json.loads(text) if text.strip() else None


# --- Postgres -----------------------------------------------------------------------------------

def psql(database_url, sql, check=True):
    """One statement through `psql -XAtq`; its output, stripped."""
    r = subprocess.run(["psql", database_url, "-XAtq", "-v", "ON_ERROR_STOP=1", "-c", sql],
                       capture_output=True, text=True)
    if r.returncode != 0:
        if check:
            raise BenchError(f"psql failed: {r.stderr.strip()[:500]}")
        return None
    return r.stdout.strip()


def have(*tools):
    return all(shutil.which(t) for t in tools)


def upstream_config(port, log_level="warn"):
    """A fleet config with one `openai` provider `up` in front of the fake upstream on `port`,
    aliased `bench` (the chat and streams scenarios), logging at `log_level`."""
    return f"""
[router.providers.up]
kind = "openai"
base_url = "http://127.0.0.1:{port}/v1"
models = ["bench-model"]

[router.aliases]
bench = ["up/bench-model"]

[telemetry]
log_level = "{log_level}"
"""


def mock_config(extra=""):
    """A fleet config with the embedded mock provider, `extra` TOML after it, and quiet logs."""
    return f"""
[router.providers.mock]
kind = "mock"
{extra}
[telemetry]
log_level = "warn"
"""


# --- what a stretch of work costs weft and its infrastructure -------------------------------------

PERF_EVENTS = "raw_syscalls:sys_enter,context-switches"


class Meter:
    """What one weft process and what it leans on spend over a stretch of work (the `runs` and
    `plans` scenarios): weft's CPU; the SQL statements (`pg_stat_statements`, when the server
    preloads it) and commits of its database; every `postgres` process's CPU; with the
    sitting's private NATS and Redis, their messages, commands and CPU; with `perf`, weft's
    system calls and context switches; with `callgrind` (weft started under `callgrind_bin`),
    its instructions. `start(name)` before the stretch, `stop()` after it: the differences.
    A figure that cannot be read here is None."""

    def __init__(self, s, fleet, pid, callgrind=False):
        self.s, self.pid, self.callgrind = s, pid, callgrind
        self.db = db = fleet.database_url
        self.pg_statements = psql(db, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements",
                                  check=False) is not None \
            and psql(db, "SELECT count(*) FROM pg_stat_statements LIMIT 1", check=False) is not None
        if not self.pg_statements:
            log("pg_stat_statements is not loaded (shared_preload_libraries): SQL statements are not counted")
        if not s.nats:
            log("using the shared NATS and Redis: their messages and commands are not counted")
        self.have_perf = shutil.which("perf") and subprocess.run(
            ["perf", "stat", "-e", PERF_EVENTS, "true"], capture_output=True).returncode == 0
        if not self.have_perf:
            log("perf stat cannot count system calls here: no syscall or context-switch counts")

    def counters(self):
        """The cumulative counters of weft's infrastructure, now."""
        s, db = self.s, self.db
        c = {"sql_statements": None, "nats_messages": None, "redis_commands": None,
             "postgres_cpu_ms": cpu_ms(postgres_pids()),
             "nats_cpu_ms": cpu_ms([s.nats_pid]) if s.nats else None,
             "redis_cpu_ms": cpu_ms([s.redis_pid]) if s.nats else None}
        if self.pg_statements:
            c["sql_statements"] = int(psql(db, "SELECT COALESCE(sum(calls), 0) FROM pg_stat_statements "
                                           "WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())"))
        c["commits"] = int(psql(db, "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"))
        if s.nats:
            c["nats_messages"], c["redis_commands"] = s.nats_in_msgs(), s.redis_commands()
        return c

    def start(self, name):
        """Begins a stretch; `name` names its perf output (`perf-<name>.csv`, a log
        `perf-stat-<name>`)."""
        s, pid = self.s, self.pid
        self.name = name
        if self.callgrind:
            subprocess.run(["callgrind_control", "-i", "on", str(pid)], capture_output=True)
            subprocess.run(["callgrind_control", "-z", str(pid)], capture_output=True)
        self.perf = None
        if self.have_perf:
            self.perf = s.spawn(f"perf-stat-{name}", ["perf", "stat", "-x,", "-e", PERF_EVENTS, "-p", pid,
                                                      "-o", s.tmp / f"perf-{name}.csv"])
        self.cpu0, self.c0 = cpu_ms([pid]), self.counters()

    def stop(self):
        """Ends the stretch: {weft_cpu_ms, the counters' differences (None where a counter
        is not read), weft_syscalls, weft_context_switches, weft_instructions}."""
        s, pid = self.s, self.pid
        cpu = cpu_ms([pid]) - self.cpu0
        syscalls = cswitches = instructions = None
        if self.perf:
            self.perf.popen.send_signal(signal.SIGINT)
            s.stop(self.perf)
            for line in (s.tmp / f"perf-{self.name}.csv").read_text().splitlines():
                f = line.split(",")
                if len(f) > 2 and f[0].isdigit():
                    if f[2] == "raw_syscalls:sys_enter":
                        syscalls = int(f[0])
                    elif f[2] == "context-switches":
                        cswitches = int(f[0])
        if self.callgrind:
            instructions = callgrind_total(pid)
            subprocess.run(["callgrind_control", "-i", "off", str(pid)], capture_output=True)
        time.sleep(1)  # statistics reach pg_stat_database within a second of a commit
        c1 = self.counters()
        d = {"weft_cpu_ms": cpu}
        d.update({k: (None if v is None or self.c0[k] is None else v - self.c0[k]) for k, v in c1.items()})
        d.update(weft_syscalls=syscalls, weft_context_switches=cswitches, weft_instructions=instructions)
        return d

    def write_statements(self, path):
        """The 20 statements of weft's database that took the most time, as `psql` prints them
        (nothing without pg_stat_statements)."""
        if not self.pg_statements:
            return
        text = subprocess.run(["psql", self.db, "-Xq", "-P", "pager=off", "-c", """
            SELECT calls, round((total_exec_time + total_plan_time)::numeric, 0) AS total_ms,
                   round((total_exec_time / NULLIF(calls, 0))::numeric, 3) AS exec_ms,
                   round((total_plan_time / NULLIF(plans, 0))::numeric, 3) AS plan_ms,
                   plans, round(rows::numeric / NULLIF(calls, 0), 1) AS rows_per_call,
                   left(regexp_replace(query, '\\s+', ' ', 'g'), 110) AS query
            FROM pg_stat_statements
            WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
            ORDER BY total_exec_time + total_plan_time DESC LIMIT 20"""],
                              capture_output=True, text=True).stdout
        Path(path).write_text(text)


def callgrind_bin(s):
    """A bin dir whose `weft` runs the real one under valgrind.bin (the tool itself, not
    Debian's wrapper script, so weft's pid is the one callgrind_control is given)."""
    if not shutil.which("valgrind.bin") or not shutil.which("callgrind_control"):
        raise BenchError("--callgrind needs valgrind.bin and callgrind_control (apt-get install valgrind)")
    d = s.tmp / "callgrind-bin"
    d.mkdir()
    for f in s.bin.iterdir():
        (d / f.name).symlink_to(f)
    (d / "weft").unlink()
    (d / "weft").write_text(f"#!/bin/sh\nexec valgrind.bin --tool=callgrind --instr-atstart=no "
                            f"--callgrind-out-file={s.tmp}/callgrind.out.%p {s.bin / 'weft'} \"$@\"\n")
    (d / "weft").chmod(0o755)
    return d


def callgrind_total(pid):
    """The instructions callgrind has counted in weft (all threads) since it was last zeroed."""
    out = subprocess.run(["callgrind_control", "-e", "Ir", str(pid)], capture_output=True,
                         text=True).stdout
    vals = [int(l.split()[-1].replace(",", "")) for l in out.splitlines() if l.strip().startswith("Th")]
    return sum(vals) if vals else None
