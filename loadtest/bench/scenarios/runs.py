"""`runs`: agent runs end to end (3 model turns and 2 `Context` tool calls on an instant mock
model; every --cancel-every-th run of a worker a long run cancelled while its reply streams) at
each concurrency, with what one run costs weft and its infrastructure (CPU, SQL statements,
commits, NATS messages, Redis commands, system calls, context switches, and with --callgrind
instructions); then `parked` (idle interactive runs and the executor's memory), and batches
parked through a separate executor process (the split arrangement of
`tests/harness/fleet.py`, on a fresh database).
"""

import os
import secrets
import threading
import time

from ..common import (SPLIT_BINARIES, BenchError, Meter, callgrind_bin, duration, get, int_list, kinds, log, ms,
                      table, status_kib)

HELP = "agent runs end to end, cancels, per-run costs, parked runs"
DURATION = "20s"


def add_args(p):
    p.add_argument("--concurrency", type=int_list, default=[16, 64],
                   help="default 16,64 ('' runs only the parked scenarios)")
    p.add_argument("--cancel-every", type=int, default=10,
                   help="every K-th run of a worker is a long run, cancelled (0 = never)")
    p.add_argument("--parked", type=int, default=10000,
                   help="interactive runs parked (0 skips the parked scenarios)")
    p.add_argument("--parked-in-flight", type=int, default=64)
    p.add_argument("--no-parked-split", action="store_true",
                   help="skip the batches parked through a separate executor process")
    p.add_argument("--parked-batches", type=int, default=2,
                   help="batches parked through the separate executor (at least 2)")
    p.add_argument("--settle", type=duration, default="5s",
                   help="wait after all parked before the last memory reading (default 5s)")
    p.add_argument("--slow-latency-ms", type=int, default=0)
    p.add_argument("--slow-token-ms", type=int, default=200)
    p.add_argument("--slow-turns", type=int, default=0)
    p.add_argument("--callgrind", action="store_true",
                   help="weft under valgrind's callgrind: instructions per run (15-50x slower; "
                        "the parked scenarios are skipped)")


def binaries(a):
    split = a.parked and not a.no_parked_split and not a.callgrind
    return SPLIT_BINARIES if split else ["weft"]


def config(a):
    return f"""
[router.providers.mock]
kind = "mock"

# Instant: the measured runs cost weft's work, not a model's.
[router.providers.mock.models.mock-1]

# Slow: the cancelled runs are still in a model call when the cancel arrives.
[router.providers.mock.models.slow]
latency_ms = {a.slow_latency_ms}
token_delay_ms = {a.slow_token_ms}

[gateway]
tenant_max_concurrent_runs = 100000

[telemetry]
log_level = "warn"

[auth]
internal_jwt_secret = "runs-bench-{secrets.token_hex(16)}"
"""


def run(s):
    a = s.args
    if a.cancel_every > 0 and a.slow_token_ms == 0 and a.slow_turns == 0:
        raise BenchError("--slow-token-ms 0 with --slow-turns 0: the long run would finish before "
                         "its cancel; set --slow-token-ms (e.g. 200) or --slow-turns (e.g. 50)")
    if not a.no_parked_split and a.parked and a.parked_batches < 2:
        raise BenchError("--parked-batches must be at least 2")
    cfg = config(a)
    fleet = s.fleet(cfg, bin_dir=callgrind_bin(s) if a.callgrind else None)
    pid = s.server_pids(fleet)[0]
    token = {"WEFT_LOADTEST_TOKEN": fleet.token}
    log(f"weft at {fleet.url} (pid {pid})")
    meter = Meter(s, fleet, pid, callgrind=a.callgrind)
    put = lambda name, body: s.api(fleet, "PUT", f"/v1/agents/{name}", body)
    put("bench", {"model": "mock-1", "tools": ["Context"]})
    put("bench-slow", {"model": "mock/slow", "tools": ["Context"], "max_iterations": 100})

    for c in a.concurrency:
        log(f"runs at concurrency {c} for {a.duration}")
        meter.start(f"c{c}")
        out = s.out / f"runs-c{c}.json"
        r = s.loadtest("runs", "--url", fleet.url, "--concurrency", c, "--duration", a.duration,
                       "--warmup", a.warmup, "--cancel-every", a.cancel_every, "--slow-turns",
                       a.slow_turns, "--executor-pid", pid, "--threads", a.gen_threads,
                       out=out, env=token)
        # weft's CPU per run over warm-up + measurement: stable where latencies move 2x on a VM.
        d = meter.stop()
        cpu, instructions = d.pop("weft_cpu_ms"), d.pop("weft_instructions")
        runs = r["runs_per_s"] * (r["duration_s"] + r["warmup_s"])
        per = lambda n: None if n is None or not runs else round(n / runs, 2)
        r["weft_cpu_ms"] = cpu
        r["weft_cpu_ms_per_run"] = per(cpu)
        r["per_run"] = {k: per(v) for k, v in d.items()}
        r["per_run"].update(weft_instructions=None if instructions is None or not runs
                            else round(instructions / runs))
        s.write_json(out.name, r)
        time.sleep(1)

    meter.write_statements(s.out / "statements.txt")

    split = not a.no_parked_split
    if a.callgrind:
        log("--callgrind: the parked scenarios are skipped")
    elif a.parked:
        log(f"parked: {a.parked} interactive runs")
        s.loadtest("parked", "--url", fleet.url, "--count", a.parked, "--in-flight",
                   a.parked_in_flight, "--settle", a.settle, "--executor-pid", pid,
                   "--threads", a.gen_threads, out=s.out / "parked.json", env=token)
        if split:
            fleet.stop()  # the split fleet's executor is measured with this one gone
            parked_split(s, cfg)
    return summarise(s)


def parked_split(s, cfg):
    """Parked runs cost a row, not executor memory: a fleet with the executor as its own process,
    --parked-batches batches kept parked, that process's memory before the first and after each
    (its smaps before the first and after the last, its RSS every half second)."""
    a = s.args
    log(f"parked with a separate executor: {a.parked_batches} x {a.parked} interactive runs, kept parked")
    fleet = s.fleet(cfg, arrangement="split", label="weft-split")
    exec_pid = s.server_pids(fleet, ["executor"])[0]
    log(f"weft executor pid {exec_pid}")
    smaps = lambda name: (s.out / name).write_text(open(f"/proc/{exec_pid}/smaps").read())
    smaps("executor-smaps-before.txt")
    stop = threading.Event()

    def sample():
        t0 = time.monotonic()
        with open(s.out / "executor-rss-series.tsv", "w") as f:
            f.write("ms\trss_anon_kib\trss_file_kib\tthreads\n")
            while not stop.is_set() and os.path.exists(f"/proc/{exec_pid}/status"):
                v = [status_kib(exec_pid, k) for k in ("RssAnon", "RssFile", "Threads")]
                if v[0] is not None:
                    f.write(f"{int((time.monotonic() - t0) * 1000)}\t{v[0]}\t{v[1]}\t{v[2]}\n")
                stop.wait(0.5)
    t = threading.Thread(target=sample, daemon=True)
    t.start()
    try:
        for batch in range(1, a.parked_batches + 1):
            s.api(fleet, "PUT", f"/v1/agents/park-{batch}", {"model": "mock-1"})
            s.loadtest("parked", "--url", fleet.url, "--agent", f"park-{batch}", "--count", a.parked,
                       "--in-flight", a.parked_in_flight, "--settle", a.settle, "--keep-parked",
                       "--executor-pid", exec_pid, "--threads", a.gen_threads,
                       out=s.out / f"parked-split-{batch}.json",
                       env={"WEFT_LOADTEST_TOKEN": fleet.token})
        smaps("executor-smaps-after.txt")
    finally:
        stop.set()
        t.join()


def summarise(s):
    a = s.args
    m = s.machine
    mib = lambda kib: None if kib is None else round(kib / 1024)
    md = [f"## weft runs benchmark, {m['date']}", "",
          f"{m['cpu']}, {m['cores']} cores, git {m['git']}; `weft up` (one process) with mock "
          f"models; generator {a.gen_threads} thread(s); {a.duration} per run after {a.warmup} "
          f"warm-up; hypervisor steal {m['cpu_steal_pct']}% of CPU time over the run", "",
          f"A run: 3 model turns and 2 `Context` tool calls (instant mock model). Every "
          f"{a.cancel_every}th run of a worker is a long run ({a.slow_turns} `Context` turns, then a "
          f"reply after {a.slow_latency_ms} ms with {a.slow_token_ms} ms between words) cancelled "
          f"once its stream shows `provider_chosen`. Latencies in ms.", ""]
    rows, per_rows, figures = [], [], {}
    for c in a.concurrency:
        r = s.read_json(f"runs-c{c}.json")
        rows.append([c, r["runs_per_s"], r["weft_cpu_ms_per_run"],
                     *[ms(get(r, f"start_run_us.{q}")) for q in ("p50", "p90", "p99", "max")],
                     *[ms(get(r, f"end_to_end_us.{q}")) for q in ("p50", "p90", "p99", "max")],
                     *[ms(get(r, f"cancel_ack_us.{q}")) for q in ("p50", "p99", "max")],
                     f"{r['cancels_acked']}/{r['cancel_runs']}", kinds(r),
                     f"{mib(get(r, 'executor_memory_start.rss_kib'))} → {mib(get(r, 'executor_memory_end.rss_kib'))}"])
        p = r["per_run"]
        per_rows.append([c, p["sql_statements"], p["commits"], p["nats_messages"], p["redis_commands"],
                         r["weft_cpu_ms_per_run"], p["postgres_cpu_ms"], p["nats_cpu_ms"],
                         p["redis_cpu_ms"], p["weft_syscalls"], p["weft_context_switches"],
                         p["weft_instructions"]])
        figures.update({f"c{c} runs/s": r["runs_per_s"],
                        f"c{c} weft CPU ms/run": r["weft_cpu_ms_per_run"],
                        f"c{c} StartRun p50 µs": get(r, "start_run_us.p50"),
                        f"c{c} end-to-end p50 µs": get(r, "end_to_end_us.p50"),
                        f"c{c} end-to-end p99 µs": get(r, "end_to_end_us.p99"),
                        f"c{c} cancel-ack p50 µs": get(r, "cancel_ack_us.p50"),
                        f"c{c} SQL statements/run": p["sql_statements"],
                        f"c{c} Postgres CPU ms/run": p["postgres_cpu_ms"],
                        f"c{c} weft syscalls/run": p["weft_syscalls"],
                        f"c{c} weft instructions/run": p["weft_instructions"]})
    if rows:
        md += [table(["workers", "runs/s", "weft CPU ms/run", "StartRun p50", "p90", "p99", "max",
                      "end-to-end p50", "p90", "p99", "max", "cancel-ack p50", "p99", "max",
                      "cancels", "failures", "RSS start → end (MiB)"], rows,
                     ["r"] * 16 + ["l"]), "",
               "Per run (counted over warm-up + measurement, divided by the runs finished in it; "
               "the cancelled runs' work is included):", "",
               table(["workers", "SQL statements", "commits", "NATS messages", "Redis commands",
                      "weft CPU ms", "Postgres CPU ms (all databases)", "NATS CPU ms",
                      "Redis CPU ms", "weft system calls", "weft context switches",
                      "weft instructions"], per_rows, ["r"] * 12)]
    if a.callgrind:
        md += ["", "Under callgrind (--callgrind): the rates, latencies and CPU times above are "
               "valgrind's (15-50x slower), and so are the system calls and context switches; the "
               "instructions are what to compare."]
    if (s.out / "parked.json").exists():
        r = s.read_json("parked.json")
        md += ["", f"Parked interactive runs (`awaiting_input`), created {r['in_flight']} at a time:", "",
               table(["runs", "created", "parked", "create p50 (ms)", "create p99 (ms)",
                      "all created (s)", "all parked (s)", "RSS before", "parked",
                      f"after {a.settle} (MiB)", "per parked run (bytes)", "cancelled after (s)",
                      "failures"],
                     [[r["count"], r["created"], r["parked"], ms(get(r, "create_us.p50")),
                       ms(get(r, "create_us.p99")), r["create_s"], r["park_s"],
                       mib(get(r, "executor_memory_before.rss_kib")),
                       mib(get(r, "executor_memory_parked.rss_kib")),
                       mib(get(r, "executor_memory_settled.rss_kib")),
                       f"{r.get('rss_per_parked_run_bytes')} (settled {r.get('rss_per_parked_run_settled_bytes')})",
                       r.get("cleanup_s"), kinds(r)]], ["r"] * 13)]
        figures.update({"parked: all parked s": r["park_s"],
                        "parked: RSS bytes/parked run": r.get("rss_per_parked_run_bytes")})
    if (s.out / "parked-split-2.json").exists():
        batches = [s.read_json(f"parked-split-{b}.json") for b in range(1, a.parked_batches + 1)
                   if (s.out / f"parked-split-{b}.json").exists()]
        md += ["", f"A separate `weft executor` process, {a.parked_batches} batches of {a.parked} "
               "interactive runs kept parked (RSS in KiB):", "",
               table(["batch", "created", "parked", "all parked (s)", "failures",
                      "executor RSS before", "after the batch settled"],
                     [[i, r["created"], r["parked"], r["park_s"], r["failures"],
                       get(r, "executor_memory_before.rss_kib"), get(r, "executor_memory_settled.rss_kib")]
                      for i, r in enumerate(batches, 1)], ["r"] * 7), ""]
        x, y = get(batches[0], "executor_memory_before.rss_kib"), get(batches[1], "executor_memory_settled.rss_kib")
        if x is None or y is None:
            md.append("Executor RSS: not measured.")
        else:
            md.append(f"Executor RSS after the second batch minus before the first: "
                      f"{round((y - x) / 1024, 2)} MiB ({batches[0]['parked'] + batches[1]['parked']} runs parked).")
            figures["split executor RSS growth over 2 batches KiB"] = y - x
        if len(batches) > 2 and x is not None:
            after = [get(b, "executor_memory_settled.rss_kib") for b in batches[1:]]
            if None not in after:
                md.append(f"After each of batches 2 to {len(batches)}, minus before the first: "
                          + ", ".join(str(round((v - x) / 1024, 2)) for v in after) + " MiB.")
    return "\n".join(md) + "\n", figures
