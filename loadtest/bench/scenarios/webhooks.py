"""`webhooks`: GitHub-signed deliveries to the webhook receiver, against each webhook at each
concurrency, with the executor off (runs stay queued: the receiver's cost, not the agent
loop's), and the CPU per delivery of weft, Postgres, Redis and NATS (warm-up included in the
divisor)."""

import secrets
import shutil
import signal
import subprocess
import time

from ..common import (BenchError, Machine, compiler_running, cpu_ms, duration, get, int_list,
                      loadavg, log, mock_config, ms, pids_named, postgres_pids, psql, seconds,
                      table, word_list)

HELP = "signed webhook deliveries: rate, latency, CPU per delivery"
DURATION = "20s"
BINARIES = ["weft"]
SECRET_ENV = "WEFT_WEBHOOK_DEFAULT__BENCH_SECRET"  # "SECRET" in the name: fleet.py masks it in logs

CONFIG = mock_config("""
[router.providers.mock.models.mock-1]

# The receiver's cost, not the agent loop's: no executor, so every run a delivery starts stays
# queued (its row, first events and dispatch message are written; nothing consumes them).
[executor]
embedded = false

# Queued runs hold admission slots until their lease ends: high enough never to refuse.
[gateway]
tenant_max_concurrent_runs = 10000000
""")


def add_args(p):
    p.add_argument("--concurrency", type=int_list, default=[16, 64], help="default 16,64")
    p.add_argument("--webhooks", type=word_list, default=["bench-run", "bench-channel"],
                   help="default bench-run,bench-channel")
    p.add_argument("--prime", type=duration, default="3s",
                   help="load per webhook before the cases, then ANALYZE (0 skips both)")
    p.add_argument("--perf", action="store_true",
                   help="a machine-wide perf profile of each case (its cost is in the numbers)")


def run(s):
    a = s.args
    if a.perf and not shutil.which("perf"):
        raise BenchError("--perf needs perf")
    secret = secrets.token_hex(32)
    # In weft's environment only, under the name the definitions' `secret_env` gives.
    fleet = s.fleet(CONFIG, env={SECRET_ENV: secret})
    pids = s.server_pids(fleet)
    db = fleet.database_url
    dbname = db.rsplit("/", 1)[1].split("?")[0]
    tenant = s.api(fleet, "GET", "/v1/me").get("tenant")
    if not tenant:
        raise BenchError("GET /v1/me named no tenant")
    s.api(fleet, "PUT", "/v1/agents/bench", {"model": "mock-1"})
    s.api(fleet, "PUT", "/v1/channels/bench-in", {"scope": "tenant"})
    hook = {"signature": "github", "secret_env": SECRET_ENV, "mapping": {"input": "$.text"}}
    targets = {"bench-run": {"agent": "bench"}, "bench-channel": {"channel": "bench-in"}}
    bad = [h for h in a.webhooks if h not in targets]
    if bad:
        raise BenchError(f"unknown --webhooks {bad}; choose from {list(targets)}")

    # weft burns the body's own id of every accepted delivery (the GitHub delivery header is not
    # signed), per webhook; `weft-loadtest webhooks` sends the same bodies (`hello <worker>-<n>`)
    # in every invocation, so each invocation gets a webhook of its own: `<kind>-prime`,
    # `<kind>-c<C>`, all defined alike.
    def define(kind, suffix):
        name = f"{kind}-{suffix}"
        s.api(fleet, "PUT", f"/v1/webhooks/{name}", dict(hook, **targets[kind]))
        return name
    log(f"weft at {fleet.url} (pids {pids}); tenant {tenant}: agent bench, channel bench-in, "
        f"webhooks {', '.join(a.webhooks)} (one definition per case)")
    env = {"WEFT_LOADTEST_WEBHOOK_SECRET": secret}
    # A fresh database has no planner statistics, and a statement prepared while a table was
    # empty keeps its plan on that connection until the table is analysed; a live database has
    # statistics, so each webhook is driven first and the database analysed.
    if seconds(a.prime) > 0:
        for h in a.webhooks:
            log(f"priming {h} for {a.prime}")
            s.loadtest("webhooks", "--url", fleet.url, "--tenant", tenant, "--webhook",
                       define(h, "prime"),
                       "--concurrency", 16, "--duration", a.prime, "--warmup", "0s",
                       "--threads", a.gen_threads, env=env)
        psql(db, "ANALYZE")
    nats = lambda: [s.nats_pid] if s.nats else pids_named("nats-server")
    redis = lambda: [s.redis_pid] if s.nats else pids_named("redis-server")
    rows, figures, noisy = [], {}, []
    for h in a.webhooks:
        for c in a.concurrency:
            case = f"{h}-c{c}"
            log(f"{h} at concurrency {c} for {a.duration}")
            load0, compiler = float(loadavg()[0]), compiler_running()
            perf = None
            if a.perf:
                perf = s.spawn(f"perf-{case}", ["perf", "record", "-a", "-F", "499", "-o",
                                                s.out / f"perf-{case}.data"])
            m0 = Machine()
            w0, p0, r0, n0 = cpu_ms(pids), cpu_ms(postgres_pids(dbname)), cpu_ms(redis()), cpu_ms(nats())
            r = s.loadtest("webhooks", "--url", fleet.url, "--tenant", tenant, "--webhook",
                           define(h, f"c{c}"),
                           "--concurrency", c, "--duration", a.duration, "--warmup", a.warmup,
                           "--threads", a.gen_threads, out=s.out / f"{case}.json", env=env)
            w, p = cpu_ms(pids) - w0, cpu_ms(postgres_pids(dbname)) - p0
            rd, n = cpu_ms(redis()) - r0, cpu_ms(nats()) - n0
            mm = Machine.since(m0)
            if perf:
                perf.popen.send_signal(signal.SIGINT)
                s.stop(perf, 60)
                flat_profile(s, case)
            ops = r["ops_incl_warmup"]
            r.update(weft_cpu_ms=w, postgres_cpu_ms=p, redis_cpu_ms=rd, nats_cpu_ms=n,
                     weft_cpu_us_per_delivery=round(w * 1000 / ops),
                     postgres_cpu_us_per_delivery=round(p * 1000 / ops),
                     redis_cpu_us_per_delivery=round(rd * 1000 / ops),
                     nats_cpu_us_per_delivery=round(n * 1000 / ops),
                     machine_busy_cores=mm["busy_cores"], steal_pct=mm["steal_pct"],
                     loadavg_before=load0, compiler_running=compiler, perf_recording=a.perf)
            s.write_json(f"{case}.json", r)
            if compiler:
                noisy.append(f"{h} at {c}")
            rows.append([h, c, r["deliveries_per_s"], *[ms(get(r, f"latency_us.{q}")) for q in
                                                        ("p50", "p90", "p99", "max")],
                         r["weft_cpu_us_per_delivery"], r["postgres_cpu_us_per_delivery"],
                         r["redis_cpu_us_per_delivery"], r["nats_cpu_us_per_delivery"],
                         r.get("generator_cpu_us_per_op"), r["machine_busy_cores"],
                         ", ".join(f"{k} × {v}" for k, v in (r.get("statuses") or {}).items())])
            figures.update({f"{case} deliveries/s": r["deliveries_per_s"],
                            f"{case} p50 µs": get(r, "latency_us.p50"),
                            f"{case} p99 µs": get(r, "latency_us.p99"),
                            f"{case} weft CPU µs/delivery": r["weft_cpu_us_per_delivery"],
                            f"{case} Postgres CPU µs/delivery": r["postgres_cpu_us_per_delivery"]})
            time.sleep(1)
    autovacuum = psql(db, "SHOW autovacuum", check=False) or "unknown"
    queued = psql(db, "SELECT count(*) FROM runs", check=False)
    m = s.machine
    s.write_json("webhooks-setup.json", {"tenant": tenant, "runs_left_queued": queued and int(queued),
                                         "postgres_autovacuum": autovacuum})
    infra = "private Redis and NATS servers" if s.nats else "Redis and NATS the whole servers'"
    md = [f"## weft webhook receiver benchmark, {m['date']}", "",
          f"{m['cpu']}, {m['cores']} cores, git {m['git']}; `weft up` (one process) with the "
          f"embedded executor **off** (runs stay queued: the receiver's cost, not the agent "
          f"loop's) and admission at 10,000,000 runs; Postgres (autovacuum {autovacuum}), Redis "
          f"and NATS on the same machine; generator {a.gen_threads} thread(s); {a.duration} per "
          f"case after {a.warmup} warm-up, each webhook primed for {a.prime} and the database "
          f"analysed before the cases; hypervisor steal {m['cpu_steal_pct']}% of CPU time over "
          f"the run"]
    if a.perf:
        md += ["", "**perf was recording the machine during every case: these numbers include its cost.**"]
    md += ["", f"Each delivery: `POST /v1/_webhooks/{tenant}/<webhook>-c<workers>`, body "
           "`{\"text\":\"hello <n>\"}`, a unique `X-GitHub-Delivery`, `X-Hub-Signature-256` "
           "(HMAC-SHA256); 202 counts as verified and accepted. `bench-run` starts a run of "
           "`bench` (mock-1), `bench-channel` publishes to the tenant channel `bench-in`. CPU per "
           "delivery is over warm-up and window (the divisor counts every delivery sent); Postgres "
           "is the backends of the benchmark's database plus the server's own processes (WAL "
           f"writer, checkpointer, … shared with other databases), {infra}. Latencies in ms. "
           "Aim: ≥ 2,000 deliveries/s with p99 ≤ 20 ms.", "",
           table(["webhook", "workers", "deliveries/s", "p50", "p90", "p99", "max",
                  "weft CPU µs/delivery", "Postgres CPU µs/delivery", "Redis µs", "NATS µs",
                  "generator µs", "busy cores", "statuses"], rows, ["l"] + ["r"] * 12 + ["l"])]
    if noisy:
        md += ["", f"A compiler was running during: {', '.join(noisy)} (noisy numbers)."]
    return "\n".join(md) + "\n", figures


def flat_profile(s, case):
    """Flat profiles (release builds keep no frame pointers): by process, by process and
    library, then by process and symbol."""
    data = s.out / f"perf-{case}.data"
    parts = []
    for sort, limit in (("comm", "0.5"), ("comm,dso", "0.5"), ("comm,sym", "0.2")):
        out = subprocess.run(["perf", "report", "-i", str(data), "--sort", sort, "--percent-limit",
                              limit, "--stdio"], capture_output=True, text=True).stdout
        parts.append("\n".join(l for l in out.splitlines() if l and not l.startswith("#")))
    (s.out / f"perf-{case}.txt").write_text("\n\n".join(parts) + "\n")
    data.unlink(missing_ok=True)
