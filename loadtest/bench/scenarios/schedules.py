"""`schedules`: --replicas `weft ingress` processes against one database fire --fires schedule
slots (--schedules schedules on a six-field every-second cron, each retiring at max_fires =
fires / schedules); no executor (runs stay queued: the scheduler's cost, not the agent loop's).
Counted from the `runs` table: fires/s, lag (scheduled time → run row), doubles, misses, CPU per
fire of the replicas and of Postgres, and fires taken over from another replica. --duration and
--warmup do not apply: the fires set the length."""

import secrets
import time

from ..common import BenchError, Machine, HZ, api, log, postgres_pids, psql, table, ticks_of

HELP = "schedule fires across ingress replicas: lag, doubles, misses"
BINARIES = ["weft"]


def add_args(p):
    p.add_argument("--schedules", type=int, default=500)
    p.add_argument("--fires", type=int, default=100000, help="a multiple of --schedules")
    p.add_argument("--replicas", type=int, default=3)
    p.add_argument("--tick-ms", type=int, default=250)
    p.add_argument("--kill", action="store_true",
                   help="SIGKILL one replica when half the slots have fired")


def config(secret):
    return f"""
[executor]
embedded = false

[ingress]
embedded = false

[gateway]
tenant_max_concurrent_runs = 100000000

[auth]
internal_jwt_secret = "{secret}"

[telemetry]
log_level = "warn"
"""


COUNT = """
WITH r AS (
  SELECT spec->'metadata'->>'schedule' AS s, spec->'metadata'->>'fire_kind' AS k,
         (spec->'metadata'->>'fire_at')::timestamptz AS at, created_at
  FROM runs),
slots AS (SELECT s, k, at, count(*) AS n, min(created_at) AS made FROM r GROUP BY 1, 2, 3),
spans AS (SELECT s, count(*) AS n, extract(epoch FROM max(at) - min(at))::bigint + 1 AS span FROM slots GROUP BY s),
lag AS (SELECT extract(epoch FROM made - at) * 1000 AS ms FROM slots)
SELECT json_build_object(
  'slots', (SELECT count(*) FROM slots),
  'runs', (SELECT count(*) FROM r),
  'doubles', (SELECT count(*) FROM slots WHERE n > 1),
  'missed_inside_spans', (SELECT coalesce(sum(span - n), 0) FROM spans),
  'schedules_short_of_max_fires', (SELECT count(*) FROM spans WHERE n <> {per}),
  'schedules_fired', (SELECT count(*) FROM spans),
  'first_slot', (SELECT min(at) FROM slots),
  'last_run', (SELECT max(created_at) FROM r),
  'fires_per_s', round(((SELECT count(*) FROM slots) / greatest(extract(epoch FROM (SELECT max(created_at) FROM r) - (SELECT min(at) FROM slots)), 1))::numeric, 1),
  'lag_ms_p50', round((SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY ms) FROM lag)::numeric, 1),
  'lag_ms_p99', round((SELECT percentile_cont(0.99) WITHIN GROUP (ORDER BY ms) FROM lag)::numeric, 1),
  'lag_ms_max', round((SELECT max(ms) FROM lag)::numeric, 1),
  'fires_taken_over', (SELECT count(*) FROM schedule_fires WHERE attempts > 0),
  'fires_failed', (SELECT count(*) FROM schedule_fires WHERE status <> 'dispatched')
)"""


def run(s):
    a = s.args
    per = a.fires // a.schedules
    if per * a.schedules != a.fires:
        raise BenchError("--fires must be a multiple of --schedules")
    secret = secrets.token_hex(32)
    fleet = s.fleet(config(secret))
    weft = s.server_pids(fleet)
    db = fleet.database_url
    s.api(fleet, "PUT", "/v1/agents/bench", {"model": "mock-1"})
    from fleet import FleetError, free_ports
    replicas = []
    for i, port in enumerate(free_ports(a.replicas), 1):
        env = dict(s.fleet_env(fleet), WEFT_DATABASE__URL=db, WEFT_AUTH__INTERNAL_JWT_SECRET=secret,
                   WEFT_INGRESS__SUBSTRATE_URL=s.substrate_url(fleet),
                   WEFT_INGRESS__LISTEN=f"127.0.0.1:{port}", WEFT_INGRESS__TICK_MS=str(a.tick_ms),
                   WEFT_GATEWAY__TENANT_MAX_CONCURRENT_RUNS="100000000",
                   WEFT_TELEMETRY__LOG_LEVEL="warn")
        replicas.append((s.spawn(f"ingress-{i}", [s.bin / "weft", "ingress"], env=env), port))
    try:
        for proc, port in replicas:
            proc.wait_port(port)
    except FleetError as e:
        raise BenchError(f"an ingress replica did not start: {e}") from e
    replicas = [proc for proc, _ in replicas]
    pids = [p.pid for p in replicas]
    m0, ing0, pg0, w0 = Machine(), ticks_of(pids), ticks_of(postgres_pids()), ticks_of(weft)
    log(f"defining {a.schedules} schedules (every second, max_fires {per}: {a.fires} slots)")
    for i in range(1, a.schedules + 1):
        api(fleet.url, "PUT", f"/v1/schedules/s{i}", fleet.token,
            {"cron": "* * * * * *", "agent": "bench", "input": "tick", "max_fires": per,
             "catch_up_max": 1000})
    killed, start = False, time.monotonic()
    limit = per * 4 + 600
    while True:
        left = int(psql(db, "SELECT count(*) FROM schedules WHERE retired_at IS NULL"))
        pending = int(psql(db, "SELECT count(*) FROM schedule_fires WHERE status = 'claimed'"))
        fired = int(psql(db, "SELECT count(*) FROM runs"))
        if a.kill and not killed and fired >= a.fires // 2:
            log(f"killing replica 1 (pid {pids[0]}) at {fired} runs")
            replicas[0].popen.kill()
            killed = True
        if left == 0 and pending == 0:
            break
        if time.monotonic() - start > limit:
            raise BenchError(f"not done after {limit} s: {left} live, {pending} claimed, {fired} runs")
        time.sleep(2)
    mm = Machine.since(m0)
    ing, pg, w = ticks_of(pids) - ing0, ticks_of(postgres_pids()) - pg0, ticks_of(weft) - w0
    import json
    r = json.loads(psql(db, COUNT.format(per=per)))
    ms_ = lambda t: t * 1000 // HZ
    slots = r["slots"] or 1
    r.update(scenario="schedules", schedules=a.schedules, planned_fires=a.fires,
             replicas=a.replicas, tick_ms=a.tick_ms, replica_killed=killed,
             ingress_cpu_ms=ms_(ing), postgres_cpu_ms=ms_(pg), weft_up_cpu_ms=ms_(w),
             machine_busy_cores=mm["busy_cores"], steal_pct=mm["steal_pct"],
             ingress_cpu_us_per_fire=round(ms_(ing) * 1000 / slots),
             postgres_cpu_us_per_fire=round(ms_(pg) * 1000 / slots),
             weft_up_cpu_us_per_fire=round(ms_(w) * 1000 / slots))
    s.write_json("schedules.json", r)
    m = s.machine
    md = "\n".join([
        f"## weft schedules benchmark, {m['date']}", "",
        f"{m['cpu']}, {m['cores']} cores, git {m['git']}; {a.schedules} schedules on "
        f"`* * * * * *`, {a.replicas} `weft ingress` replicas, tick {a.tick_ms} ms, replica "
        f"killed: {str(killed).lower()}; hypervisor steal {m['cpu_steal_pct']}%", "",
        table(["slots", "runs", "doubles", "missed", "fires/s", "lag p50 ms", "lag p99 ms",
               "lag max ms", "ingress CPU µs/fire", "Postgres CPU µs/fire", "weft up CPU µs/fire",
               "taken over"],
              [[r["slots"], r["runs"], r["doubles"],
                r["missed_inside_spans"] + r["schedules_short_of_max_fires"], r["fires_per_s"],
                r["lag_ms_p50"], r["lag_ms_p99"], r["lag_ms_max"], r["ingress_cpu_us_per_fire"],
                r["postgres_cpu_us_per_fire"], r["weft_up_cpu_us_per_fire"],
                r["fires_taken_over"]]], ["r"] * 12)])
    figures = {k: r[k] for k in ("fires_per_s", "lag_ms_p50", "lag_ms_p99", "doubles",
                                 "ingress_cpu_us_per_fire", "postgres_cpu_us_per_fire")}
    figures["missed"] = r["missed_inside_spans"] + r["schedules_short_of_max_fires"]
    return md + "\n", figures
