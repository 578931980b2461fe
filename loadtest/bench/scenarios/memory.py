"""`memory`: the memory routes under a set/get/search mix, at each concurrency, with weft's and
Postgres's CPU per op (over seeding, warm-up and window, divided by every op sent in them)."""

import time

from ..common import cpu_ms, get, int_list, kinds, log, mock_config, ms, postgres_pids, table

HELP = "the memory routes: set/get/search mix, CPU per op"
DURATION = "10s"
BINARIES = ["weft"]

CONFIG = mock_config("""
# Instant: embeddings cost weft's work, not a model's.
[router.providers.mock.models.mock-1]
""")


def add_args(p):
    p.add_argument("--concurrency", type=int_list, default=[16, 64], help="default 16,64")
    p.add_argument("--keys", type=int, default=1000)
    p.add_argument("--embedded", type=int, default=100)
    p.add_argument("--value-bytes", type=int, default=100)
    p.add_argument("--set-pct", type=int, default=30)
    p.add_argument("--search-pct", type=int, default=2)


def run(s):
    a = s.args
    fleet = s.fleet(CONFIG)
    pids = s.server_pids(fleet)
    log(f"weft at {fleet.url} (pids {pids})")
    figures, rows = {}, []
    for c in a.concurrency:
        log(f"memory at concurrency {c} for {a.duration}")
        w0, p0 = cpu_ms(pids), cpu_ms(postgres_pids())
        r = s.loadtest("memory", "--url", fleet.url, "--concurrency", c, "--duration", a.duration,
                       "--warmup", a.warmup, "--keys", a.keys, "--embedded", a.embedded,
                       "--value-bytes", a.value_bytes, "--set-pct", a.set_pct,
                       "--search-pct", a.search_pct, "--threads", a.gen_threads,
                       out=s.out / f"memory-c{c}.json", env={"WEFT_LOADTEST_TOKEN": fleet.token})
        # The seeding writes count as ops.
        ops = r["ops_incl_warmup"] + r["keys"]
        r["weft_cpu_ms"], r["postgres_cpu_ms"] = cpu_ms(pids) - w0, cpu_ms(postgres_pids()) - p0
        r["weft_cpu_us_per_op"] = round(r["weft_cpu_ms"] * 1000 / ops)
        r["postgres_cpu_us_per_op"] = round(r["postgres_cpu_ms"] * 1000 / ops)
        s.write_json(f"memory-c{c}.json", r)
        rows.append([c, r["ops_per_s"], r["get_set_per_s"], r["weft_cpu_us_per_op"],
                     r["postgres_cpu_us_per_op"], ms(get(r, "get_us.p50")), ms(get(r, "get_us.p99")),
                     ms(get(r, "set_us.p50")), ms(get(r, "set_us.p99")),
                     ms(get(r, "search_us.p50")), ms(get(r, "search_us.p99")),
                     ms(get(r, "all_us.p99")), kinds(r)])
        figures.update({f"c{c} ops/s": r["ops_per_s"],
                        f"c{c} weft CPU µs/op": r["weft_cpu_us_per_op"],
                        f"c{c} Postgres CPU µs/op": r["postgres_cpu_us_per_op"],
                        f"c{c} get p50 µs": get(r, "get_us.p50"),
                        f"c{c} set p50 µs": get(r, "set_us.p50"),
                        f"c{c} all p99 µs": get(r, "all_us.p99")})
        time.sleep(1)
    m = s.machine
    md = "\n".join([
        f"## weft memory benchmark, {m['date']}", "",
        f"{m['cpu']}, {m['cores']} cores, git {m['git']}; `weft up` (one process), Postgres on "
        f"the same machine; generator {a.gen_threads} thread(s); {a.duration} per run after "
        f"{a.warmup} warm-up; hypervisor steal {m['cpu_steal_pct']}% of CPU time over the run", "",
        f"Mix: {a.set_pct}% PUT ({a.value_bytes}-byte values), {a.search_pct}% search (top 10 of "
        f"{a.embedded} embedded entries, exact scan), the rest GET, over {a.keys} keys of one "
        f"tenant scope. Latencies in ms; CPU per op over seeding, warm-up and window (Postgres: "
        f"every postgres process on the machine).", "",
        table(["workers", "ops/s", "get+set/s", "weft CPU µs/op", "Postgres CPU µs/op", "get p50",
               "get p99", "set p50", "set p99", "search p50", "search p99", "all p99",
               "failures"], rows, ["r"] * 13)])
    return md + "\n", figures
